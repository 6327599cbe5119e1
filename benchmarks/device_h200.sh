#!/usr/bin/env bash
# One lease of a CUDA GPU (the workplace's H200), run from the repository root with $OUT set:
#   1. benchmarks/kernels_gpu.py: the Pallas kernels compiled through Triton, checked and timed (alone on the GPU);
#   2. the PhaseFormer ETT runs the CPU could not finish, as worker processes sharing the GPU
#      (benchmarks/phaseformer_ett.py --runs-dir --no-aggregate), stopped at a deadline; finished runs are kept.
# Afterwards, here: copy $OUT's runs into benchmarks/results/phaseformer_ett_runs/ and run --render-only.
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-545}          # seconds after start at which the workers are stopped
KERNEL_LIMIT=${KERNEL_LIMIT:-170}  # seconds for the kernel section
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 MPLBACKEND=Agg
LOGS=gpu_logs; RUNS=gpu_runs; mkdir -p $LOGS $RUNS
python3 -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv
timeout $KERNEL_LIMIT python3 benchmarks/kernels_gpu.py --out "$OUT" --reps 20 --routing-budget-s 90 \
  --git-commit "${GIT_COMMIT:-unknown}" 2>&1 | grep -v -i "warning" | tee $LOGS/kernels.log
echo "kernels done at $(( $(date +%s) - T0 ))s"
H="ETTh1-96,ETTh1-192,ETTh1-336,ETTh1-720,ETTh2-96,ETTh2-192,ETTh2-336,ETTh2-720"
M1="ETTm1-96,ETTm1-192,ETTm1-336,ETTm1-720"; M2="ETTm2-96,ETTm2-192,ETTm2-336,ETTm2-720"
worker() {  # name, then benchmark arguments
  local name=$1; shift
  python3 benchmarks/phaseformer_ett.py --runs-dir $RUNS --no-aggregate "$@" > $LOGS/$name.log 2>&1 &
}
worker pf2021_h --models phaseformer --seeds 2021 --settings "$H,$M1"
worker pf2021_m2 --models phaseformer --seeds 2021 --settings "$M2"
for s in 2022 2023; do
  worker pf${s}_h --models phaseformer --seeds $s --settings "$H"
  worker pf${s}_m1 --models phaseformer --seeds $s --settings "$M1"
  worker pf${s}_m2 --models phaseformer --seeds $s --settings "$M2"
done
worker base --models sparsetsf,dlinear --seeds 2021 --settings all
while [ $(( $(date +%s) - T0 )) -lt $DEADLINE ] && [ -n "$(jobs -r)" ]; do sleep 5; done
kill $(jobs -p) 2>/dev/null; sleep 2
echo "workers stopped at $(( $(date +%s) - T0 ))s; runs finished: $(ls $RUNS | wc -l)"
grep -h "^done" $LOGS/*.log
tar czf "$OUT/pf_gpu.tar.gz" $RUNS $LOGS
