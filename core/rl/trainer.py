"""The on-policy loop: rollout -> rewards -> advantages -> minibatch epochs of clipped-surrogate updates.

One RL step (`RLTrainer.step`):
1. sample `prompts_per_step` prompts (a seeded permutation per epoch of the prompt set; the position is
   checkpointed) and roll out G completions each (`core.rl.rollout`, key `fold_in(rollout_key, step)`);
2. record the old policy's and the reference's per-token log-probs with one teacher-forced pass each
   (at the sampling temperature, as verl does: the ratio is exactly 1 on the first minibatch), and for PPO
   the values;
3. advantages: GRPO / Dr.GRPO / RLOO from the group's rewards, or GAE over policy tokens for PPO;
4. `epochs` passes over `minibatches` shuffled minibatches, each one jitted `core.train` update of the
   policy (full weights or LoRA adapters; the reference and, under LoRA, the base weights sit in the state's
   frozen slot, never differentiated or donated).

Checkpoints hold the trainable state, the optimizer state, the step and the prompt position, so a killed run
resumed from its workdir ends bitwise where an uninterrupted one ends (every key is a `fold_in` of the
step). With a mesh, rollouts and updates are split over its "data" axis.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from core import sharding as sharding_lib
from core import train as train_lib
from core.checkpoint import Checkpointer
from core.lm import lora as lora_lib
from core.lm import model as model_lib
from core.lm.logprobs import chunked_logprobs
from core.optim import OptimizerConfig, make_optimizer
from core.rl import advantages as adv_lib
from core.rl import losses as loss_lib
from core.rl import value as value_lib
from core.rl.rollout import Environment, Rollout, RolloutConfig, TextTokenizer, rollout

ALGORITHMS = ("grpo", "dr_grpo", "rloo", "ppo")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RLConfig:
    """algorithm: grpo | dr_grpo | rloo (group baselines) | ppo (GAE with a value head on the policy's
    hidden states). epochs x minibatches updates per rollout batch. lora: train adapters on frozen base
    weights (the reference is the base model without adapters, as TRL does with PEFT)."""

    algorithm: str = "grpo"
    steps: int = 20
    prompts_per_step: int = 8
    rollout: RolloutConfig = RolloutConfig()
    loss: loss_lib.LossConfig = loss_lib.LossConfig()
    optimizer: OptimizerConfig = OptimizerConfig(lr=1e-4, clip_norm=1.0)
    epochs: int = 1
    minibatches: int = 1
    gamma: float = 1.0
    lam: float = 0.95
    value_coef: float = 0.5
    value_clip: float = 0.2
    lora: lora_lib.LoraConfig | None = None
    chunk_size: int = 4096
    seed: int = 0
    log_every: int = 1
    ckpt_every: int = 10

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm={self.algorithm!r}: expected one of {ALGORITHMS}")
        for name in ("steps", "prompts_per_step", "epochs", "minibatches", "log_every", "ckpt_every", "chunk_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: expected >= 1")
        rows = self.prompts_per_step * self.rollout.group_size
        if rows % self.minibatches:
            raise ValueError(f"minibatches={self.minibatches}: expected a divisor of prompts_per_step x group_size "
                             f"= {rows}")
        if not (0 <= self.gamma <= 1 and 0 <= self.lam <= 1):
            raise ValueError(f"gamma={self.gamma}, lam={self.lam}: expected both in [0, 1]")


def _shift_right(x: jax.Array) -> jax.Array:
    """Per-token log-probs aligned to token columns: column j scores tokens[j] given tokens[<j] (0 at j=0)."""
    return jnp.concatenate([jnp.zeros_like(x[:, :1]), x[:, :-1]], axis=1)


def _shared_prompt_hidden(model, tokens: jax.Array, attention: jax.Array, prompts: dict[str, jax.Array],
                          lora: lora_lib.LoraInputs | None) -> tuple[jax.Array, jax.Array]:
    """Final hidden states before each response token, with each prompt run once for its whole group.

    prompts: "tokens" / "mask" (B, P) the distinct prompts, left-padded; "group" (N,) each row's prompt;
    "columns" (N, R) the columns of the row's response in `tokens`. The prompts fill a KV cache (B rows),
    each row reads its prompt's copy and its response (N, R) attends to it, so the prompt's forward and
    backward are paid once per group instead of G times (the G rows' gradients meet in the repeated
    cache). Returns (hidden (N, R, D): hidden[:, j] is the state in which response token j is chosen,
    the response tokens (N, R))."""
    cols, group = prompts["columns"], prompts["group"]
    response = jnp.take_along_axis(tokens, cols, axis=1)
    response_mask = jnp.take_along_axis(attention, cols, axis=1)
    B, P = prompts["tokens"].shape
    cache = model_lib.init_cache(model.config, B, P + cols.shape[1])
    first = model(prompts["tokens"], attention_mask=prompts["mask"], cache=cache, return_hidden=True, lora=lora)
    c = first.cache
    cache = model_lib.KVCache(k=c.k[:, group], v=c.v[:, group], valid=c.valid[group], positions=c.positions[group],
                              index=c.index, lengths=c.lengths[group])
    if lora is not None and lora.key is not None:  # the response pass draws its own dropout masks
        lora = lora.replace(key=jax.random.fold_in(lora.key, 1))
    rest = model(response, attention_mask=response_mask, cache=cache, return_hidden=True, lora=lora).hidden
    # left padding puts every prompt's last token in column P - 1: its state chooses response token 0
    hidden = jnp.concatenate([first.hidden[group, -1][:, None], rest[:, :-1]], axis=1)
    return hidden, response


def forward_scores(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array, attention: jax.Array, *,
                   temperature: float, chunk_size: int, lora: lora_lib.LoraInputs | None = None,
                   value_head: Any = None, prompts: dict[str, jax.Array] | None = None) -> dict[str, jax.Array]:
    """One teacher-forced pass: per-token log-probs and entropies aligned to token columns (N, L), and values
    (N, L) when a value head is given: value[:, j] is the head on the hidden state before token j, the value
    of the state in which token j is chosen (verl's critic alignment).

    With `prompts` (see `_shared_prompt_hidden`) each distinct prompt is run once and only the response
    columns are scored (prompt columns hold 0; every loss masks them out); without, every row's whole
    sequence is run."""
    model = nnx.merge(graphdef, params, copy=True)
    unembedding = model.unembedding()
    kw = dict(chunk_size=chunk_size, temperature=temperature, with_entropy=True)
    if prompts is None:
        hidden = model(tokens, attention_mask=attention, return_hidden=True, lora=lora).hidden
        lp, ent = chunked_logprobs(hidden, unembedding, jnp.roll(tokens, -1, axis=1), **kw)
        out = {"logprobs": _shift_right(lp), "entropy": _shift_right(ent)}
        if value_head is not None:
            out["values"] = _shift_right(value_lib.value_from_hidden(value_head, hidden))
        return out
    hidden, response = _shared_prompt_hidden(model, tokens, attention, prompts, lora)
    lp, ent = chunked_logprobs(hidden, unembedding, response, **kw)
    rows, cols = jnp.arange(tokens.shape[0])[:, None], prompts["columns"]
    place = lambda x: jnp.zeros(tokens.shape, x.dtype).at[rows, cols].set(x)  # noqa: E731
    out = {"logprobs": place(lp), "entropy": place(ent)}
    if value_head is not None:
        out["values"] = place(value_lib.value_from_hidden(value_head, hidden))
    return out


def shared_prompts(roll: Rollout, config: RolloutConfig) -> dict[str, np.ndarray]:
    """The shared-prompt layout of a rollout (`forward_scores(prompts=...)`): its distinct prompts left-padded
    to the batch's longest (B, P), each row's prompt id (N,), and the columns of each row's
    `max_response_tokens` response slots (N, R) in the right-padded (N, L) rows."""
    group = np.asarray(roll.group)
    _, first = np.unique(group, return_index=True)  # each prompt's first row (ids are 0 .. B - 1)
    B, R = len(first), config.max_response_tokens
    P = roll.tokens.shape[1] - R  # the rollout's rows are the longest prompt + R wide
    tokens = np.full((B, P), config.pad_id, np.int32)
    mask = np.zeros((B, P), bool)
    for b, n in enumerate(first):
        length = int(roll.prompt_lengths[n])
        tokens[b, P - length:] = roll.tokens[n, :length]
        mask[b, P - length:] = True
    columns = (np.asarray(roll.prompt_lengths)[:, None] + np.arange(R)[None]).astype(np.int32)
    return {"tokens": tokens, "mask": mask, "group": group.astype(np.int32), "columns": columns}


class PromptStream:
    """Prompts in a seeded permutation per pass over the set; `state()`/`restore()` for checkpoints."""

    def __init__(self, size: int, per_step: int, seed: int):
        if size < per_step:
            raise ValueError(f"{size} prompts: expected at least prompts_per_step={per_step}")
        self.size, self.per_step, self.seed, self.position = size, per_step, seed, 0
        self._order: tuple[int, np.ndarray] | None = None  # (epoch, its permutation), drawn once per epoch

    def next(self) -> np.ndarray:
        idx = [self._at(self.position + i) for i in range(self.per_step)]
        self.position += self.per_step
        return np.asarray(idx)

    def _at(self, i: int) -> int:
        epoch, offset = divmod(i, self.size)
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, np.random.default_rng([self.seed, epoch]).permutation(self.size))
        return int(self._order[1][offset])

    def state(self) -> dict:
        return {"position": self.position}

    def restore(self, state: dict) -> None:
        self.position = int(state["position"])


class RLTrainer:
    """The loop over a fixed prompt set. prompts[i] (token list), envs[i] and env_prompts[i] (what the
    environment's `reset` receives) describe task i."""

    def __init__(self, config: RLConfig, graphdef: nnx.GraphDef, params: nnx.State, *,
                 prompts: Sequence[Sequence[int]], envs: Sequence[Environment], env_prompts: Sequence[Any],
                 tokenizer: TextTokenizer, mesh: jax.sharding.Mesh | None = None):
        if not len(prompts) == len(envs) == len(env_prompts):
            raise ValueError(f"{len(prompts)} prompts, {len(envs)} envs, {len(env_prompts)} env prompts: expected "
                             "the same number")
        self.config, self.graphdef, self.mesh = config, graphdef, mesh
        self.prompts, self.envs, self.env_prompts = list(prompts), list(envs), list(env_prompts)
        self.tokenizer = tokenizer
        c = config
        self.stream = PromptStream(len(prompts), c.prompts_per_step, c.seed)
        self.tx, self.schedule = make_optimizer(c.optimizer)
        key = jax.random.key(c.seed)
        lm_config = nnx.merge(graphdef, params, copy=True).config
        trainable: dict[str, Any] = {}
        if c.lora is not None:
            trainable["adapters"] = lora_lib.init_lora(lm_config, c.lora, jax.random.fold_in(key, 1))
            frozen = {"base": params}
        else:
            trainable["policy"] = jax.tree.map(jnp.copy, params)  # donated by the updates; the caller's stays
            frozen = {"reference": params}
        if c.algorithm == "ppo":
            trainable["value_head"] = value_lib.init_value_head(lm_config.hidden_size, jax.random.fold_in(key, 2))
        self.state = train_lib.init_train_state(trainable, self.tx, jax.random.fold_in(key, 3), frozen=frozen)
        self.rollout_key = jax.random.fold_in(key, 4)
        self._update = train_lib.make_train_step(self._loss, self.tx, schedule=self.schedule)
        self._scores = jax.jit(self._score_fn, static_argnames=("which",))

    # --- the pieces, each pure --------------------------------------------------------------------
    def _policy_args(self, trainable, frozen, key=None) -> tuple[nnx.State, lora_lib.LoraInputs | None]:
        if self.config.lora is not None:
            return frozen["base"], lora_lib.LoraInputs(adapters=trainable["adapters"], config=self.config.lora, key=key)
        return trainable["policy"], None

    def _score_fn(self, trainable, frozen, tokens, attention, prompts, *, which: str):
        c = self.config
        kw = dict(temperature=c.rollout.temperature or 1.0, chunk_size=c.chunk_size, prompts=prompts)
        if which == "reference":
            ref = frozen["base"] if c.lora is not None else frozen["reference"]
            return forward_scores(self.graphdef, ref, tokens, attention, **kw)
        params, lora = self._policy_args(trainable, frozen)
        return forward_scores(self.graphdef, params, tokens, attention, lora=lora,
                              value_head=trainable.get("value_head"), **kw)

    def _loss(self, trainable, batch, key, frozen):
        c = self.config
        params, lora = self._policy_args(trainable, frozen, key)
        scores = forward_scores(self.graphdef, params, batch["tokens"], batch["attention"], lora=lora,
                                temperature=c.rollout.temperature or 1.0, chunk_size=c.chunk_size,
                                value_head=trainable.get("value_head"), prompts=batch.get("prompts"))
        mask = batch["policy"]
        old = batch.get("old_logprobs")
        if old is None:  # one update per batch: the policy being updated is the old policy
            old = jax.lax.stop_gradient(scores["logprobs"])
        ref = batch.get("ref_logprobs")
        if ref is None and c.loss.kl_coef > 0:  # one update per batch: the reference pass is part of it
            ref = jax.lax.stop_gradient(self._score_fn(trainable, frozen, batch["tokens"], batch["attention"],
                                                       batch.get("prompts"), which="reference")["logprobs"])
        loss, metrics = loss_lib.policy_loss(scores["logprobs"], old, ref, batch["advantages"], mask,
                                             scores["entropy"], c.loss)
        if c.algorithm == "ppo":
            vloss = loss_lib.value_loss(scores["values"], batch["old_values"], batch["returns"], mask,
                                        clip=c.value_clip, aggregation=c.loss.aggregation)
            loss = loss + c.value_coef * vloss
            metrics = {**metrics, "value_loss": vloss}
        return loss, {**metrics, "tokens": mask.sum().astype(jnp.float32)}

    def advantages(self, batch: dict[str, jax.Array], roll: Rollout) -> dict[str, jax.Array]:
        """Add advantages (N, L) (and returns for PPO) to a scored rollout batch."""
        c = self.config
        mask = batch["policy"]
        if c.algorithm == "ppo":
            rewards = adv_lib.token_rewards(jnp.asarray(roll.step_rewards), jnp.asarray(roll.step_positions),
                                            mask.shape[1])
            adv, ret = adv_lib.gae(rewards, batch["old_values"], mask, gamma=c.gamma, lam=c.lam)
            adv = adv_lib.masked_whiten(adv, mask)  # as verl / TRL PPO / OpenRLHF do before the update
            return {**batch, "advantages": adv, "returns": ret}
        seq = adv_lib.group_advantages(jnp.asarray(roll.rewards), jnp.asarray(roll.group),
                                       num_groups=int(roll.group.max()) + 1, mode=c.algorithm)
        return {**batch, "advantages": self._place({"a": np.asarray(seq)[:, None] * roll.policy})["a"]}

    # --- one step ------------------------------------------------------------------------------------
    @property
    def _on_policy_single_update(self) -> bool:
        """One update per rollout batch: the old policy is the policy being updated, so its log-probs are the
        loss's own (stop-gradient), and the separate scoring pass is skipped (as TRL does); the reference's
        log-probs are computed inside the update's program (one program instead of two); PPO still needs
        the old values before its advantages."""
        c = self.config
        return c.epochs == 1 and c.minibatches == 1 and c.algorithm != "ppo"

    def collect(self, step: int) -> tuple[Rollout, dict[str, jax.Array], dict[str, float]]:
        """Roll out step `step`'s prompts and score them: (rollout, the update batch on device, timings)."""
        c = self.config
        t0 = time.perf_counter()
        idx = self.stream.next()
        params, lora = self._policy_args(self.state.params, self.state.frozen)
        if lora is not None:
            params = lora_lib.merge(params, lora.adapters, c.lora)  # sample from the merged policy
        roll = rollout(self.graphdef, params, [self.prompts[i] for i in idx], [self.envs[i] for i in idx],
                       [self.env_prompts[i] for i in idx], self.tokenizer,
                       jax.random.fold_in(self.rollout_key, step), c.rollout)
        t1 = time.perf_counter()
        batch = self._place({"tokens": roll.tokens, "attention": roll.attention, "policy": roll.policy})
        if self._shares_prompts:
            batch["prompts"] = self._place_prompts(shared_prompts(roll, c.rollout))
        prompts = batch.get("prompts")
        if not self._on_policy_single_update:
            old = self._scores(self.state.params, self.state.frozen, batch["tokens"], batch["attention"], prompts,
                               which="policy")
            batch["old_logprobs"] = old["logprobs"]
            if c.algorithm == "ppo":
                batch["old_values"] = old["values"]
        if c.loss.kl_coef > 0 and not self._on_policy_single_update:  # else the update scores the reference
            ref = self._scores(self.state.params, self.state.frozen, batch["tokens"], batch["attention"], prompts,
                               which="reference")
            batch["ref_logprobs"] = ref["logprobs"]
        batch = jax.block_until_ready(self.advantages(batch, roll))
        return roll, batch, {"rollout_seconds": t1 - t0, "score_seconds": time.perf_counter() - t1}

    def step(self, step: int) -> dict[str, float]:
        """One RL step: collect, then `epochs` x `minibatches` updates. Returns the step's metrics."""
        c = self.config
        roll, batch, times = self.collect(step)
        t0 = time.perf_counter()
        N = roll.tokens.shape[0]
        size = N // c.minibatches
        metrics: list[dict] = []
        for epoch in range(c.epochs):
            order = np.random.default_rng([c.seed, step, epoch]).permutation(N)
            for m in range(c.minibatches):
                if c.minibatches == 1:
                    mb = batch
                else:
                    rows = jnp.asarray(order[m * size:(m + 1) * size])
                    mb = self._place({k: jnp.take(v, rows, axis=0) for k, v in batch.items()})
                self.state, out = self._update(self.state, mb)
                metrics.append(out)
        jax.block_until_ready(self.state)
        t_update = time.perf_counter() - t0
        metrics = jax.device_get(metrics)
        record = {k: float(np.mean([m[k] for m in metrics])) for k in metrics[0]}
        policy_tokens = int(roll.policy.sum())
        record.update({
            "reward": float(roll.rewards.mean()), "reward_std": float(roll.rewards.std()),
            "response_length": float(roll.policy.sum(axis=1).mean()),
            "tool_calls": float(roll.num_tool_calls.mean()), "finished": float(roll.finished.mean()),
            "rollout_tokens_per_s": policy_tokens / max(times["rollout_seconds"], 1e-9),
            "update_tokens_per_s": c.epochs * policy_tokens / max(t_update, 1e-9),
            "update_seconds": t_update, **times})
        return record

    @property
    def _shares_prompts(self) -> bool:
        """Score each distinct prompt once per group (`forward_scores(prompts=...)`): when every update sees
        whole groups (one minibatch) and this process holds the whole batch."""
        return self.config.minibatches == 1 and jax.process_count() == 1

    def _place(self, batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        if self.mesh is None:
            return {k: jnp.asarray(v) for k, v in batch.items()}
        return sharding_lib.shard_batch(batch, self.mesh)

    def _place_prompts(self, prompts: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        """The distinct prompts on every device (each computes their forward), the per-row ids split by rows."""
        distinct = {k: prompts[k] for k in ("tokens", "mask")}
        rows = {k: prompts[k] for k in ("group", "columns")}
        placed = {k: jnp.asarray(v) for k, v in distinct.items()} if self.mesh is None else (
            sharding_lib.replicate(distinct, self.mesh))
        return {**placed, **self._place(rows)}

    # --- the loop ------------------------------------------------------------------------------------
    def train(self, workdir: str | pathlib.Path, *, progress_bar: bool = True,
              eval_fn: Callable[[RLTrainer], dict[str, float]] | None = None, eval_every: int | None = None,
              until: int | None = None) -> list[dict]:
        """Run to `config.steps` (or stop after step `until`, e.g. to fit a time slot), resuming from
        `workdir/checkpoints`. Returns every logged record."""
        c = self.config
        workdir = pathlib.Path(workdir)
        checkpointer = Checkpointer(workdir / "checkpoints", keep=2, config=c)
        start = 0
        if checkpointer.latest_step() is not None:
            restored, data_state = checkpointer.restore(self.state._replace(frozen=None))
            self.state = restored._replace(frozen=self.state.frozen)
            self.stream.restore(data_state)
            start = int(jax.device_get(self.state.step)) // (c.epochs * c.minibatches)
        log = train_lib.MetricsLog(workdir / "metrics.jsonl", start, config=c)
        bar = train_lib.progress(total=c.steps, initial=start, desc=f"rl {workdir.name}", disable=not progress_bar)
        try:
            for step in range(start, min(c.steps, until or c.steps)):
                record = self.step(step)
                train_lib.check_finite({"loss": record["loss"]}, self.state.params, first=step + 1, last=step + 1,
                                       checkpointer=checkpointer)
                if eval_fn is not None and eval_every and ((step + 1) % eval_every == 0 or step + 1 == c.steps):
                    record.update({f"eval/{k}": float(v) for k, v in eval_fn(self).items()})
                if (step + 1) % c.log_every == 0 or step + 1 == c.steps or any(k.startswith("eval/") for k in record):
                    log.write({"step": step + 1, **record})
                bar.set_postfix(reward=f"{record['reward']:.3g}", kl=f"{record.get('kl', 0.0):.3g}", refresh=False)
                bar.update(1)
                if (step + 1) % c.ckpt_every == 0 or step + 1 in (c.steps, until):
                    checkpointer.save(step + 1, self.state._replace(frozen=None), data_state=self.stream.state())
        finally:
            bar.close()
            checkpointer.close()
            log.close()
        return log.read()

    def policy_params(self) -> nnx.State:
        """The current policy as plain model params (LoRA merged)."""
        params, lora = self._policy_args(self.state.params, self.state.frozen)
        return params if lora is None else lora_lib.merge(params, lora.adapters, self.config.lora)
