"""Rollouts for policy-gradient RL on `core.lm`: G completions per prompt from one prefill, multi-turn tool use.

`rollout` prefills each prompt once, repeats its KV cache G times, and samples. A turn ends at an EOS token,
at a tool-call stop sequence, or after `max_new_tokens` tokens. Each turn's text goes to the row's
`Environment.step`, which answers (observation, done, reward). A non-empty observation is tokenized and
appended to the cache (`core.lm.generate.append_tokens`, no re-prefill), and generation goes on until the
row is done, has emitted EOS, or has used its turn or token budget. A turn's environment steps run together on
`tool_workers` threads (as verl runs tool calls concurrently), so `step` may run for several rows at once; an
environment with shared mutable state must guard it. A tool that raises, returns nothing or runs past
`tool_timeout_s` (counted from the call's own start) becomes an observation that says so; it never ends the
batch.

The result, `Rollout`, holds right-padded sequences (prompt + response) with per-token masks: `policy`
(tokens the policy generated; the only ones in the policy loss and the KL), `observation` (tool output,
masked out of both), and `attention` (every real token). Each environment step's reward sits at the last
token of its action (`step_rewards`, `step_positions`) for process-reward advantages.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import itertools
import os
import time
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from core.lm import model as model_lib
from core.lm.generate import (
    DecodeState,
    SamplingConfig,
    append_tokens,
    continue_decoding,
    pad_prompts,
    prefill,
    start_state,
)


class Environment(Protocol):
    """A task the policy acts in. `reset(prompt)` gives the episode's state; `step(state, action_text)` runs
    one action (a tool call or a final answer) and returns (observation text or None, done, reward)."""

    def reset(self, prompt: Any) -> Any: ...

    def step(self, state: Any, action_text: str) -> tuple[str | None, bool, float]: ...


class TextTokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class RolloutConfig:
    """group_size: completions per prompt (G). max_new_tokens: per turn. max_turns: actions per episode.
    max_response_tokens: the whole response (policy + observation tokens). max_prompt_tokens: the longest
    prompt accepted (a longer one is an error naming its length). tool_stop_sequences: token sequences that
    end a turn as a tool call (e.g. the tokens of `</tool_call>`). tool_workers: threads that run a turn's
    environment steps concurrently."""

    group_size: int = 4
    max_new_tokens: int = 32
    max_turns: int = 1
    max_response_tokens: int = 64
    max_prompt_tokens: int = 64
    max_observation_tokens: int = 32
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    eos_tokens: tuple[int, ...] = ()
    tool_stop_sequences: tuple[tuple[int, ...], ...] = ()
    pad_id: int = 0
    prompt_bucket: int = 16
    tool_timeout_s: float = 10.0
    tool_workers: int = 4

    def __post_init__(self):
        for name in ("group_size", "max_new_tokens", "max_turns", "max_response_tokens", "max_prompt_tokens",
                     "prompt_bucket", "tool_workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: expected >= 1")
        if self.max_observation_tokens < 0 or self.tool_timeout_s <= 0:
            raise ValueError(f"max_observation_tokens={self.max_observation_tokens}, tool_timeout_s="
                             f"{self.tool_timeout_s}: expected >= 0 and > 0")
        if self.max_new_tokens > self.max_response_tokens:
            raise ValueError(f"max_new_tokens={self.max_new_tokens}: expected at most max_response_tokens="
                             f"{self.max_response_tokens}")
        SamplingConfig(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_k=self.top_k,
                           top_p=self.top_p)  # validates the sampling fields

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_k=self.top_k,
                                  top_p=self.top_p, stop_tokens=self.eos_tokens,
                                  stop_sequences=self.tool_stop_sequences, pad_id=self.pad_id)


class Rollout(NamedTuple):
    """N = prompts x G rows, L = longest prompt + max_response_tokens columns, right-padded.

    tokens (N, L) int32; attention / policy / observation (N, L) bool masks; prompt_lengths (N,);
    sample_logprobs (N, L): log-probs of the policy tokens under the distribution sampled from (0 elsewhere);
    group (N,) the prompt index of each row; rewards (N,) summed environment rewards; step_rewards and
    step_positions (N, max_turns): each step's reward and the column of its action's last token (-1: none);
    num_tool_calls (N,) steps that returned an observation; finished (N,) rows that ended (done or EOS)
    rather than running out of budget; texts: each row's per-turn action texts."""

    tokens: np.ndarray
    attention: np.ndarray
    policy: np.ndarray
    observation: np.ndarray
    prompt_lengths: np.ndarray
    sample_logprobs: np.ndarray
    group: np.ndarray
    rewards: np.ndarray
    step_rewards: np.ndarray
    step_positions: np.ndarray
    num_tool_calls: np.ndarray
    finished: np.ndarray
    texts: list


@functools.partial(jax.jit, static_argnames=("graphdef", "cache_size", "group_size"))
def _prefill_groups(graphdef: nnx.GraphDef, params: nnx.State, tokens, mask, *, cache_size: int,
                    group_size: int) -> DecodeState:
    """Prefill B prompts once and repeat the cache G times: rows b*G .. b*G+G-1 share prompt b."""
    logits, cache = prefill(graphdef, params, tokens, mask, cache_size=cache_size)
    axes = model_lib.KVCache(k=1, v=1, valid=0, positions=0, index=None, lengths=0)
    cache = model_lib.KVCache(*[x if ax is None else jnp.repeat(x, group_size, axis=ax)
                                for x, ax in zip(cache, axes)])
    return start_state(cache, jnp.repeat(logits, group_size, axis=0))


def _step_result(result: Any) -> tuple[str | None, bool, float]:
    """An environment's answer as (observation, done, reward), or an observation saying what was wrong with it."""
    if result is None:
        return "Error: the tool returned nothing.", False, 0.0
    try:
        observation, done, reward = result
        return observation, bool(done), float(reward)
    except (TypeError, ValueError):
        return f"Error: the tool returned {type(result).__name__}, not (observation, done, reward).", False, 0.0


# tool threads by (process, worker count), kept between rollouts; a forked child starts its own (threads do not fork)
_POOLS: dict[tuple[int, int], concurrent.futures.ThreadPoolExecutor] = {}


def _tool_pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    """A pool of `workers` tool threads, reused across rollouts (starting threads costs more than a fast tool)."""
    key = (os.getpid(), workers)
    if key not in _POOLS:
        _POOLS[key] = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tool")
    return _POOLS[key]


def _retire_pool(workers: int) -> None:
    """Drop a pool one of whose threads may be stuck in a hung tool: the next rollout gets fresh threads and
    nobody waits for the stuck one (it ends on its own, or with the process)."""
    pool = _POOLS.pop((os.getpid(), workers), None)
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


def _run_env_steps(pool: concurrent.futures.ThreadPoolExecutor, calls: Sequence[tuple[Environment, Any, str]],
                   timeout: float) -> tuple[list[tuple[str | None, bool, float]], bool]:
    """env.step(state, text) for every call, all submitted at once (one thread hand-off per call, not two);
    a raise, an empty answer or a call running past `timeout` seconds from its own start becomes an
    observation that says so. A call still queued (every worker busy with a hung tool) gets `timeout` from
    the moment it is waited for; if it has not started by then it is cancelled and reported as timed out.
    Returns the results in order and whether any call timed out."""
    started: list[float | None] = [None] * len(calls)

    def run(i: int, env: Environment, state: Any, text: str):
        started[i] = time.monotonic()
        return env.step(state, text)

    futures = [pool.submit(run, i, *call) for i, call in enumerate(calls)]
    results, timed_out = [], False
    for i, future in enumerate(futures):
        waited_from = time.monotonic()
        while True:
            start = started[i]
            left = (waited_from if start is None else start) + timeout - time.monotonic()
            try:
                results.append(_step_result(future.result(timeout=max(left, 0.0))))
            except concurrent.futures.TimeoutError:
                if start is None and started[i] is not None:
                    continue  # it started while we waited: it gets its own `timeout`
                future.cancel()
                timed_out = True
                results.append((f"Error: the tool call timed out after {timeout:g} s.", False, 0.0))
            except Exception as error:  # noqa: BLE001 (any failure of user code is reported to the policy)
                results.append((f"Error: the tool call raised {type(error).__name__}: {error}", False, 0.0))
            break
    return results, timed_out


def rollout(graphdef: nnx.GraphDef, params: nnx.State, prompts: Sequence[Sequence[int]],
            envs: Sequence[Environment], env_prompts: Sequence[Any], tokenizer: TextTokenizer, key: jax.Array,
            config: RolloutConfig) -> Rollout:
    """Sample `config.group_size` episodes per prompt. prompts: token lists; envs[i] and env_prompts[i]
    (what `reset` gets, e.g. the task record) belong to prompt i; each of its G rows gets its own
    `reset` state. Turn t of the batch is sampled with `fold_in(key, t)`."""
    c = config
    if not len(prompts) == len(envs) == len(env_prompts) or not prompts:
        raise ValueError(f"{len(prompts)} prompts, {len(envs)} envs, {len(env_prompts)} env prompts: expected the "
                         "same non-zero number")
    for i, p in enumerate(prompts):
        if not 0 < len(p) <= c.max_prompt_tokens:
            raise ValueError(f"prompt {i} has {len(p)} tokens: expected 1 to max_prompt_tokens={c.max_prompt_tokens}")
    G, B = c.group_size, len(prompts)
    N = B * G
    tokens, mask = pad_prompts(prompts, pad_id=c.pad_id, bucket=c.prompt_bucket)
    P = tokens.shape[1]
    # every turn may use max_new_tokens slots of decode; every turn but the last may append an observation
    cache_size = P + c.max_turns * c.max_new_tokens + (c.max_turns - 1) * c.max_observation_tokens
    state = _prefill_groups(graphdef, params, jnp.asarray(tokens), jnp.asarray(mask), cache_size=cache_size,
                            group_size=G)
    sampling = c.sampling()
    group = np.repeat(np.arange(B), G)
    env_states = [envs[group[n]].reset(env_prompts[group[n]]) for n in range(N)]
    # each row's response so far: tokens, kinds (1 policy, 2 observation) and sampling log-probs (0 for obs)
    response: list[list[int]] = [[] for _ in range(N)]
    kinds: list[list[int]] = [[] for _ in range(N)]
    logprobs: list[list[float]] = [[] for _ in range(N)]
    step_rewards = np.zeros((N, c.max_turns), np.float32)
    step_positions = np.full((N, c.max_turns), -1, np.int32)
    num_tool_calls = np.zeros((N,), np.int32)
    finished = np.zeros((N,), bool)
    texts: list[list[str]] = [[] for _ in range(N)]
    eos = set(c.eos_tokens)
    active = np.ones((N,), bool)  # rows still in their episode
    pool = _tool_pool(c.tool_workers)
    timed_out = False
    try:
        for turn in range(c.max_turns):
            state = state._replace(done=jnp.asarray(~active))
            out = continue_decoding(graphdef, params, state, jax.random.fold_in(key, turn), sampling)
            toks, lps, live = (np.asarray(x) for x in jax.device_get((out.tokens, out.sample_logprobs, out.mask)))
            observations: list[list[int]] = [[] for _ in range(N)]
            rows = np.flatnonzero(active)
            counts = live.sum(axis=1)  # a row's live tokens are a prefix of the turn's columns
            toks, lps = toks.tolist(), lps.tolist()
            actions = {}
            for n in rows:
                action = toks[n][:counts[n]]
                response[n] += action
                kinds[n] += [1] * len(action)
                logprobs[n] += lps[n][:counts[n]]
                texts[n].append(tokenizer.decode([t for t in action if t not in eos]))
                actions[n] = action
            results, hung = _run_env_steps(pool, [(envs[group[n]], env_states[n], texts[n][-1]) for n in rows],
                                           c.tool_timeout_s)
            timed_out |= hung
            for n, (observation, done, reward) in zip(rows, results):
                action = actions[n]
                step_rewards[n, turn] = reward
                step_positions[n, turn] = len(prompts[group[n]]) + len(response[n]) - 1 if action else -1
                if done or (action and action[-1] in eos):
                    finished[n], active[n] = True, False
                    continue
                if observation:
                    num_tool_calls[n] += 1
                budget_left = min(c.max_observation_tokens, c.max_response_tokens - len(response[n]))
                obs = []
                if observation and turn < c.max_turns - 1 and budget_left > 0:
                    obs = tokenizer.encode(observation)[:budget_left]
                if not obs:
                    active[n] = False  # out of turns or budget, or nothing to go on with
                    continue
                observations[n] = obs
                response[n] += obs
                kinds[n] += [2] * len(obs)
                logprobs[n] += [0.0] * len(obs)
            if not active.any():
                break
            obs_tokens, obs_mask = _left_pad(observations, c.pad_id, max(c.max_observation_tokens, 1))
            state = append_tokens(graphdef, params, out.state, obs_tokens, obs_mask)
    finally:
        if timed_out:
            _retire_pool(c.tool_workers)
    return _assemble(prompts, (response, kinds, logprobs), group, step_rewards, step_positions, num_tool_calls,
                     finished, texts, c)


def _left_pad(rows: list[list[int]], pad_id: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    tokens = np.full((len(rows), width), pad_id, np.int32)
    mask = np.zeros((len(rows), width), bool)
    for i, r in enumerate(rows):
        if r:
            tokens[i, width - len(r):] = r
            mask[i, width - len(r):] = True
    return tokens, mask


def _assemble(prompts, response, group, step_rewards, step_positions, num_tool_calls, finished, texts,
              c: RolloutConfig) -> Rollout:
    """The right-padded (N, L) arrays from each row's prompt and (tokens, kinds, log-probs) response lists."""
    tokens_r, kinds_r, logprobs_r = ([x[:c.max_response_tokens] for x in part] for part in response)
    N = len(tokens_r)
    L = max(len(p) for p in prompts) + c.max_response_tokens
    prompt_lengths = np.array([len(prompts[g]) for g in group], np.int32)
    response_lengths = np.array([len(r) for r in tokens_r], np.int32)
    lengths = prompt_lengths + response_lengths
    # every row's prompt then response, flattened, written at (row, column) in one go
    rows = np.repeat(np.arange(N), lengths)
    cols = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    flat = list(itertools.chain.from_iterable(x for n in range(N) for x in (prompts[group[n]], tokens_r[n])))
    is_response = cols >= np.repeat(prompt_lengths, lengths)
    tokens = np.full((N, L), c.pad_id, np.int32)
    tokens[rows, cols] = flat
    attention = np.zeros((N, L), bool)
    attention[rows, cols] = True
    kind = np.zeros((N, L), np.int32)
    kind[rows[is_response], cols[is_response]] = list(itertools.chain.from_iterable(kinds_r))
    sample_lp = np.zeros((N, L), np.float32)
    sample_lp[rows[is_response], cols[is_response]] = list(itertools.chain.from_iterable(logprobs_r))
    policy, observation = kind == 1, kind == 2
    step_positions = np.where(step_positions < L, step_positions, -1)
    return Rollout(tokens=tokens, attention=attention, policy=policy, observation=observation,
                   prompt_lengths=prompt_lengths, sample_logprobs=sample_lp, group=group,
                   rewards=step_rewards.sum(axis=1), step_rewards=step_rewards, step_positions=step_positions,
                   num_tool_calls=num_tool_calls, finished=finished, texts=texts)
