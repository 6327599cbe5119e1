#!/usr/bin/env bash
# One lease of a CUDA GPU (the workplace's H200), run from the repository root with $OUT set:
# benchmarks/kernels_gpu.py compiles the Pallas kernels through Triton, checks them against their references and
# times them (routing kernel, LM decode kernel, one PhaseFormer training step), writing kernels_gpu.json to $OUT
# after each section. Afterwards, here: copy $OUT/kernels_gpu.json and the log into benchmarks/results/.
# First compile everything on the CPU (benchmarks/kernels_triton_aot.py) so the lease is spent on what needs a GPU.
set -u
KERNEL_LIMIT=${KERNEL_LIMIT:-480}  # seconds for the whole kernel benchmark
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 MPLBACKEND=Agg
python3 -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv
timeout $KERNEL_LIMIT python3 benchmarks/kernels_gpu.py --out "$OUT" --reps 20 --routing-budget-s 240 \
  --git-commit "${GIT_COMMIT:-unknown}" 2>&1 | grep -v -i "warning" | tee "$OUT/kernels_gpu_h200.log"
