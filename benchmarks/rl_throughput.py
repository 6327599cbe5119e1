"""GRPO step throughput: core.rl's RLTrainer vs TRL's GRPOTrainer (torch CPU, 2 threads), same model and settings.

The workload (issue #29's benchmark) is the rl_toy task (`core.rl.toy`): its Qwen2 decoder (`RLToyConfig().model`,
2 layers x 64, vocab 12, float32) with seeded random weights written by `core.lm.weights.save_hf` and loaded
by both sides from that folder; its string-reversal prompts (`make_data`, seed 0); its GRPO settings
(`RLToyConfig.rl_config("grpo", 0)`: 16 prompts x G=8 completions per step, lr, KL coefficient, clip range,
temperature 1). One optimizer update per rollout batch on both sides (ours: epochs = minibatches = 1; TRL:
`num_iterations=1`, `gradient_accumulation_steps=1`, `steps_per_generation=1`, the whole batch of 128 rows in
one forward/backward). TRL's GRPOConfig defaults that would slow it here are turned off: gradient checkpointing
(ours recomputes nothing but the log-prob chunks) and bf16 (both run float32).

Completion length is fixed on both sides, so both do the same work whatever the weights: every completion is
exactly `max_new_tokens` tokens. Ours rolls out with no stop token (`eos_tokens=()`); TRL, whose tokenizer has
the toy's EOS and pad ids, gets `min_new_tokens = max_completion_length` (its documented way, through
`generation_kwargs`, to keep EOS from ending a completion). The reward on both sides is exact match of the
completion's symbols (PAD/BOS/EOS dropped, as TRL's `skip_special_tokens` decoding drops them) against the
reversal; it costs nothing next to the model and only matters in that both sides compute it.

What is timed, per step after `--warmup` steps (compile / first-call steps) are skipped:
- step: ours, the wall time of `RLTrainer.step`; TRL, the time between consecutive `on_step_end` callbacks
  (data loading, generation, scoring, the update and its bookkeeping);
- rollout: sampling the completions (ours `rollout_seconds`: prefill + decode + environment; TRL: its
  `_generate`, which tokenizes the prompts, calls `model.generate` and decodes);
- update: ours `update_seconds` (the jitted loss, gradient and optimizer step); TRL: from the end of
  `_generate_and_score_completions` to `on_step_end` (forward, backward, clipping, AdamW step);
- the rest of the step (step - rollout - update) is scoring. With one update per batch both skip the old-policy
  pass (using the detached current log-probs). TRL computes rewards, the reference log-probs and advantages;
  ours computes the reference log-probs inside the update's program (so its update column includes that
  pass) and its scoring is the advantages and the batch's assembly. Each side scores prompts as its library
  does: TRL runs every row's prompt + completion, ours each distinct prompt once per group.

Every measurement is its own process (`--worker ours|trl`); the two alternate, `--processes` pairs, so both see
the same machine, each pinned to the same 2 CPUs (`worker_cpus`). Run it alone on an idle machine (the load
average is recorded before and after).

    .venv/bin/python benchmarks/rl_throughput.py       # needs the [torch] extra (torch, transformers, trl)
    -> benchmarks/results/rl_throughput.json, table in core/rl/README.md ("Throughput against TRL")
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SEED, TORCH_THREADS, NAME = 0, 2, "rl_throughput"
# our LossConfig.aggregation -> TRL's loss_type with the same normalisation (one micro-batch per update)
TRL_LOSS_TYPE = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}


def toy_config():
    from core.rl.toy import RLToyConfig

    return RLToyConfig()


def rl_config():
    """The toy's GRPO config with the stop token removed: every completion is max_new_tokens long."""
    c = toy_config().rl_config("grpo", SEED)
    return dataclasses.replace(c, rollout=dataclasses.replace(c.rollout, eos_tokens=()))


def special_ids() -> dict[str, int]:
    from core.lm import data as lm_data

    return {"pad": lm_data.PAD, "bos": lm_data.BOS, "eos": lm_data.EOS}


def answer_text(symbols_text: str) -> str:
    """The symbols of a space-separated id string, special ids dropped (what TRL's decode keeps)."""
    special = {str(i) for i in special_ids().values()}
    return " ".join(w for w in symbols_text.split() if w not in special)


def tasks() -> tuple[list[list[int]], list[list[int]]]:
    """The toy's RL prompts and answers (token lists; answers end with EOS)."""
    from core.rl.toy import make_data

    _, rl_examples, _ = make_data(toy_config(), SEED)
    return [list(p) for p, _ in rl_examples], [list(a) for _, a in rl_examples]


def setup(*, group_size: int, prompts_per_step: int, completion_lengths: list[int], lr: float, beta: float,
          clip: tuple[float, float], temperature: float, updates_per_batch: int, loss: str, num_params: int) -> dict:
    """What each worker reports of the configuration it actually ran (compared by the sanity-check claim).
    completion_lengths: TRL's per completion; ours the per-step mean response length (RLTrainer.step's record),
    which equals max_new_tokens only when every row is that long."""
    return {"group_size": group_size, "prompts_per_step": prompts_per_step,
            "rows_per_step": group_size * prompts_per_step, "completion_tokens_min": int(min(completion_lengths)),
            "completion_tokens_max": int(max(completion_lengths)),
            "lr": lr, "beta": beta, "clip": list(clip), "temperature": temperature,
            "updates_per_rollout_batch": updates_per_batch, "loss_normalisation": loss, "num_params": int(num_params)}


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _summary(steps: list[float], rollouts: list[float], updates: list[float], tokens: list[int], warmup: int) -> dict:
    steps, rollouts, updates, tokens = (np.asarray(x[warmup:], float) for x in (steps, rollouts, updates, tokens))
    return {"step_seconds": steps.tolist(), "rollout_seconds": rollouts.tolist(), "update_seconds": updates.tolist(),
            "tokens_per_step": tokens.tolist(), "peak_rss_mb": _peak_rss_mb(), "cpus": sorted(os.sched_getaffinity(0))}


# --- ours ---------------------------------------------------------------------------------------------------------
def worker_ours(folder: str, warmup: int, steps: int) -> dict:
    import flax
    import jax

    from core.lm import weights as weights_lib
    from core.rl.toy import ExactMatch, SymbolTokenizer
    from core.rl.trainer import RLTrainer

    class SymbolsMatch(ExactMatch):
        """The toy's exact match, on the completion's symbols only (no stop token ends the completion)."""

        def step(self, state, action_text):
            return None, True, float(answer_text(action_text) == answer_text(state))

    config = rl_config()
    _, graphdef, params = weights_lib.load_hf(folder)
    prompts, answers = tasks()
    trainer = RLTrainer(config, graphdef, params, prompts=prompts, envs=[SymbolsMatch()] * len(prompts),
                        env_prompts=answers, tokenizer=SymbolTokenizer())
    # The jitted update returns before it has run (JAX dispatches asynchronously) and RLTrainer.step waits for it
    # only when it reads the metrics, after its update_seconds clock stops; block inside the update so that
    # update_seconds holds the update's compute (the step's total is unchanged: the wait moves, it is not added).
    update = trainer._update
    trainer._update = lambda state, batch: jax.block_until_ready(update(state, batch))
    step_s, roll_s, upd_s, tokens, lengths = [], [], [], [], []
    for step in range(warmup + steps):
        t0 = time.perf_counter()
        record = trainer.step(step)
        jax.block_until_ready(trainer.state)
        step_s.append(time.perf_counter() - t0)
        roll_s.append(record["rollout_seconds"])
        upd_s.append(record["update_seconds"])
        rows = config.prompts_per_step * config.rollout.group_size
        tokens.append(round(record["response_length"] * rows))
        lengths.append(record["response_length"])
    loss = config.loss
    out = _summary(step_s, roll_s, upd_s, tokens, warmup)
    out["setup"] = setup(group_size=config.rollout.group_size, prompts_per_step=config.prompts_per_step,
                         completion_lengths=lengths, lr=config.optimizer.lr, beta=loss.kl_coef,
                         clip=(loss.clip_low, loss.clip_high if loss.clip_high is not None else loss.clip_low),
                         temperature=config.rollout.temperature, updates_per_batch=config.epochs * config.minibatches,
                         loss=loss.aggregation, num_params=sum(np.size(x) for x in jax.tree.leaves(params)))
    out["versions"] = f"jax {jax.__version__} ({jax.default_backend()}), flax {flax.__version__}"
    return out


# --- TRL ----------------------------------------------------------------------------------------------------------
def symbol_tokenizer(vocab_size: int):
    """A transformers fast tokenizer whose token i is the string str(i), split on whitespace, with the toy's
    pad / bos / eos ids, left padding (TRL's requirement) and no added tokens, so it encodes a toy prompt
    `SymbolTokenizer().decode(ids)` back to exactly `ids`."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    ids = special_ids()
    tok = Tokenizer(models.WordLevel({str(i): i for i in range(vocab_size)}, unk_token=str(ids["pad"])))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # single_word: the special "1" must not match inside "11"
    special = {k: AddedToken(str(v), single_word=True, special=True) for k, v in ids.items()}
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=special["pad"], bos_token=special["bos"],
                                   eos_token=special["eos"], padding_side="left")


def worker_trl(folder: str, warmup: int, steps: int, workdir: str) -> dict:
    import datasets
    import torch
    import transformers
    import trl

    from core.rl.toy import SymbolTokenizer

    torch.set_num_threads(TORCH_THREADS)
    config = rl_config()
    loss = config.loss
    if loss.aggregation not in TRL_LOSS_TYPE:
        raise ValueError(f"loss aggregation={loss.aggregation!r}: expected one TRL has, {sorted(TRL_LOSS_TYPE)}")
    if loss.kl_estimator not in ("k3", "low_var_kl"):
        raise ValueError(f"kl_estimator={loss.kl_estimator!r}: expected k3 (TRL's only estimator)")
    rows = config.prompts_per_step * config.rollout.group_size
    length = config.rollout.max_new_tokens
    prompts, answers = tasks()
    sym = SymbolTokenizer()
    texts = [sym.decode(p) for p in prompts]
    dataset = datasets.Dataset.from_dict({"prompt": texts, "answer": [sym.decode(a) for a in answers]})
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa")
    tokenizer = symbol_tokenizer(model.config.vocab_size)
    encoded = tokenizer(texts)["input_ids"]
    if encoded != prompts:
        bad = next(i for i, (e, p) in enumerate(zip(encoded, prompts)) if e != p)
        raise ValueError(f"prompt {bad} encodes to {encoded[bad]}: expected the toy's ids {prompts[bad]}")

    def exact_match(prompts, completions, answer, **_):
        return [float(answer_text(c) == answer_text(a)) for c, a in zip(completions, answer)]

    timing = {"rollout": [], "scored": [], "step_end": [], "lengths": []}

    class TimedGRPOTrainer(trl.GRPOTrainer):
        def _generate(self, prompts):
            t0 = time.perf_counter()
            out = super()._generate(prompts)
            timing["rollout"].append(time.perf_counter() - t0)
            timing["lengths"].append([len(c) for c in out[1]])
            return out

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            timing["scored"].append(time.perf_counter())
            return out

    class StepTimer(transformers.TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            timing["start"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            timing["step_end"].append(time.perf_counter())

    args = trl.GRPOConfig(
        output_dir=workdir, use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False, seed=SEED,
        max_steps=warmup + steps,
        per_device_train_batch_size=rows, gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
        num_generations=config.rollout.group_size, max_completion_length=length,
        generation_kwargs={"min_new_tokens": length}, temperature=config.rollout.temperature,
        top_k=config.rollout.top_k, top_p=config.rollout.top_p,
        learning_rate=config.optimizer.lr, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=config.optimizer.weight_decay, adam_beta1=config.optimizer.b1, adam_beta2=config.optimizer.b2,
        adam_epsilon=config.optimizer.eps, max_grad_norm=config.optimizer.clip_norm, optim="adamw_torch",
        beta=loss.kl_coef, epsilon=loss.clip_low, epsilon_high=loss.clip_high,
        loss_type=TRL_LOSS_TYPE[loss.aggregation],
        scale_rewards="group", report_to="none", logging_steps=10**6, save_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0)
    trainer = TimedGRPOTrainer(model=model, reward_funcs=exact_match, args=args, train_dataset=dataset,
                               processing_class=tokenizer, callbacks=[StepTimer()])
    trainer.train()
    n = warmup + steps
    if not (len(timing["rollout"]) == len(timing["scored"]) == len(timing["step_end"]) == n):
        raise ValueError(f"{len(timing['rollout'])} generations, {len(timing['step_end'])} optimizer steps: "
                         f"expected one of each per step ({n})")
    ends = [timing["start"], *timing["step_end"]]
    step_s = [b - a for a, b in zip(ends[:-1], ends[1:])]
    upd_s = [e - s for s, e in zip(timing["scored"], timing["step_end"])]
    lengths = [n for step in timing["lengths"] for n in step]
    out = _summary(step_s, timing["rollout"], upd_s, [sum(x) for x in timing["lengths"]], warmup)
    clip_high = loss.clip_high if loss.clip_high is not None else loss.clip_low
    out["setup"] = setup(group_size=args.num_generations,
                         prompts_per_step=args.generation_batch_size // args.num_generations,
                         completion_lengths=lengths, lr=args.learning_rate, beta=args.beta,
                         clip=(args.epsilon, args.epsilon_high if args.epsilon_high is not None else clip_high),
                         temperature=args.temperature,
                         updates_per_batch=(args.num_iterations * args.steps_per_generation
                                            // args.gradient_accumulation_steps),
                         loss={v: k for k, v in TRL_LOSS_TYPE.items()}[args.loss_type],
                         num_params=sum(p.numel() for p in model.parameters()))
    out["versions"] = (f"trl {trl.__version__}, transformers {transformers.__version__}, torch {torch.__version__} "
                       f"({TORCH_THREADS} threads, sdpa)")
    return out


# --- driver -------------------------------------------------------------------------------------------------------
def worker_cpus() -> list[int]:
    """The CPUs every worker is pinned to: the first TORCH_THREADS this process may use, so that JAX (which
    otherwise spreads over every core) and torch (TORCH_THREADS threads) get the same hardware."""
    return sorted(os.sched_getaffinity(0))[:TORCH_THREADS]


def run_worker(kind: str, folder: str, warmup: int, steps: int) -> dict:
    cpus = worker_cpus()
    with tempfile.TemporaryDirectory() as workdir:
        cmd = [sys.executable, __file__, "--worker", kind, "--folder", folder, "--warmup", str(warmup),
               "--steps", str(steps), "--workdir", workdir, "--cpus", ",".join(map(str, cpus))]
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "TOKENIZERS_PARALLELISM": "false"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} worker failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def row(kind: str, runs: list[dict]) -> dict:
    """One table row from a kind's processes: medians over all measured steps of all processes."""
    cat = {k: np.concatenate([r[k] for r in runs]) for k in ("step_seconds", "rollout_seconds", "update_seconds",
                                                               "tokens_per_step")}
    step, roll, upd = (float(np.median(cat[k])) for k in ("step_seconds", "rollout_seconds", "update_seconds"))
    tokens = float(np.median(cat["tokens_per_step"]))
    s = runs[0]["setup"]
    return {"implementation": {"ours": "core.rl RLTrainer (JAX)", "trl": "TRL GRPOTrainer (torch)"}[kind],
            "steps_per_s": 1.0 / step, "rollout_tokens_per_s": tokens / roll, "update_tokens_per_s": tokens / upd,
            "step_seconds": step, "step_seconds_min": float(cat["step_seconds"].min()),
            "step_seconds_max": float(cat["step_seconds"].max()), "rollout_seconds": roll, "update_seconds": upd,
            "scoring_seconds": float(np.median(cat["step_seconds"] - cat["rollout_seconds"] - cat["update_seconds"])),
            "peak_rss_mb": float(np.median([r["peak_rss_mb"] for r in runs])), "versions": runs[0]["versions"],
            "processes": len(runs), "measured_steps": int(cat["step_seconds"].size), "G": s["group_size"],
            "prompts_per_step": s["prompts_per_step"], "completion_tokens": s["completion_tokens_max"]}


README = ROOT / "core" / "rl" / "README.md"
SECTION = f"""
## Throughput against TRL

GRPO steps on the rl_toy model, ours against TRL's `GRPOTrainer` (torch CPU, {TORCH_THREADS} threads, no vLLM): the
same weights, G, prompts per step, fixed completion length, learning rate, KL coefficient and one update per
rollout batch, each measurement in its own process pinned to the same {TORCH_THREADS} CPUs. Rollout is sampling,
update is the optimizer step's forward and backward (ours: with the reference pass inside it), and the rest of
a step is scoring (TRL: reference log-probs, rewards, advantages; ours: advantages);
`benchmarks/rl_throughput.py` says exactly what is timed on each side.

<!-- results:{NAME} -->
<!-- /results:{NAME} -->
"""


def render_readme() -> None:
    """Rewrite the rl_throughput block of core/rl/README.md from the JSON (appending the section if missing)."""
    from benchmarks import render

    if not README.exists():
        print(f"{README.relative_to(ROOT)} does not exist: table not rendered", file=sys.stderr)
        return
    text = README.read_text()
    if f"<!-- results:{NAME} -->" not in text:
        text = text.rstrip("\n") + "\n" + SECTION
    records = render.load_all()  # every results block of the README, not only this one (the others stay filled)
    README.write_text(render.render_text(text, records))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3, help="measurement process pairs (ours, TRL)")
    parser.add_argument("--steps", type=int, default=20, help="measured GRPO steps per process")
    parser.add_argument("--warmup", type=int, default=2, help="skipped first steps per process (compile, first call)")
    parser.add_argument("--render-only", action="store_true", help="only re-render the README table")
    parser.add_argument("--results-dir", help="write the JSON here instead of benchmarks/results and leave the "
                        "README alone (for a trial run on a loaded machine)")
    parser.add_argument("--worker", choices=("ours", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--cpus", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in ("processes", "steps", "warmup"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            raise ValueError(f"--{name}={getattr(args, name)}: expected >= {0 if name == 'warmup' else 1}")
    if args.cpus:  # pin the worker before jax / torch start their thread pools
        os.sched_setaffinity(0, [int(c) for c in args.cpus.split(",")])
    if args.worker == "ours":
        print(json.dumps(worker_ours(args.folder, args.warmup, args.steps)))
        return
    if args.worker == "trl":
        print(json.dumps(worker_trl(args.folder, args.warmup, args.steps, args.workdir)))
        return
    if args.render_only:
        render_readme()
        return

    import jax

    from core.lm import model as model_lib
    from core.lm import weights as weights_lib
    from core.results import claim, write_results

    wall = time.perf_counter()
    load_before = os.getloadavg()
    results = {"ours": [], "trl": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = str(pathlib.Path(tmp) / "rl_toy_model")
        model = toy_config().model
        _, params = model_lib.init(model, jax.random.key(SEED))
        weights_lib.save_hf(folder, model, params)
        for i in range(args.processes):
            for kind in (("ours", "trl") if i % 2 == 0 else ("trl", "ours")):
                results[kind].append(run_worker(kind, folder, args.warmup, args.steps))
                r = results[kind][-1]
                print(f"{kind} process {i}: {1 / np.median(r['step_seconds']):.2f} steps/s (rollout "
                      f"{np.median(r['rollout_seconds']):.3f} s, update {np.median(r['update_seconds']):.3f} s)",
                      flush=True)
    rows = [row(kind, runs) for kind, runs in results.items()]
    ratios = [float(np.median(t["step_seconds"]) / np.median(o["step_seconds"]))
              for o, t in zip(results["ours"], results["trl"])]
    lo, med = min(ratios), float(np.median(ratios))
    setups = [r["setup"] for runs in results.values() for r in runs]
    same = all(s == setups[0] for s in setups)
    s = setups[0]
    differ = sorted({k for x in setups for k in x if x[k] != s.get(k)})
    claims = [
        claim("at_least_2x_trl_per_step", f"a core.rl GRPO step (rollout + scoring + update) on the rl_toy model is at "
              f"least 2x as fast as TRL's GRPOTrainer (torch CPU, {TORCH_THREADS} threads, no vLLM)", lo >= 2.0,
              f"TRL / ours step time {med:.2f}x median over {len(ratios)} interleaved process pairs (range "
              f"{lo:.2f}-{max(ratios):.2f}x); held only if every pair is >= 2x; the first {args.warmup} steps of "
              "each process (compile / first call) excluded", n=len(ratios), interval=[lo, max(ratios)]),
        claim("same_configuration", "sanity check, not a speed claim: both sides ran the same configuration (G, "
              "prompts per step, completion length, learning rate, KL coefficient, clip range, temperature, one "
              "update per rollout batch, loss normalisation, parameter count), as each worker read it back from "
              "its trainer and its generated completions", same,
              (f"all {len(setups)} processes: G={s['group_size']}, {s['prompts_per_step']} prompts/step, completions "
               f"{s['completion_tokens_min']}-{s['completion_tokens_max']} tokens, lr={s['lr']}, beta={s['beta']}, "
               f"clip={s['clip']}, {s['updates_per_rollout_batch']} update/batch, {s['loss_normalisation']}, "
               f"{s['num_params']} params") if same else f"processes differ in {differ}", kind="check"),
    ]
    cpus = sorted({c for runs in results.values() for r in runs for c in r["cpus"]})
    scale = (f"the rl_toy model and GRPO settings: {s['prompts_per_step']} prompts x G={s['group_size']}, "
             f"{s['completion_tokens_max']}-token completions, one update per rollout batch, {args.steps} measured "
             f"steps after {args.warmup} warm-up steps per process, {args.processes} interleaved process pairs, each "
             f"worker pinned to CPUs {cpus} of {os.cpu_count()}")
    path = write_results(NAME, rows=rows, claims=claims, wall_seconds=time.perf_counter() - wall, scale=scale,
                         configuration=s, pair_ratios=ratios, worker_cpus=cpus, loadavg_before=load_before,
                         loadavg_after=os.getloadavg(), directory=args.results_dir)
    if args.results_dir is None:
        render_readme()
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
