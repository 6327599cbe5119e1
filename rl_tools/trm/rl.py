"""RL arms on ToolWorld over `core.rl`: the rollout's calls found and labelled, scored by the TRM or the oracle,
and turned into advantages (`credit.py`) through `RLTrainer`'s `advantages` method.

Arms (`ARMS`): GRPO outcome-only; GRPO + TRM with group-level or turn-level normalisation; GRPO with a
trajectory-level score (ORM: the mean TRM score of the trajectory's calls added to the outcome; a
simplification of a separately trained trajectory model); GRPO with the oracle's exact per-call labels
(turn-level; the upper bound); PPO outcome-only; PPO + TRM (alpha x score at each call's last token).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from core.rl.rollout import Rollout, RolloutConfig, rollout
from core.rl.trainer import RLConfig, RLTrainer
from rl_tools.trm import credit
from rl_tools.trm.model import trm_scores
from rl_tools.trm.world import Question, ToolWorldEnv, World


class Arm(NamedTuple):
    algorithm: str  # "grpo" | "ppo"
    reward: str  # "outcome" | "trm" | "orm" | "oracle"
    level: str  # GRPO call normalisation: "none" | "group" | "turn"


ARMS = {
    "grpo_outcome": Arm("grpo", "outcome", "none"),
    "grpo_trm_group": Arm("grpo", "trm", "group"),
    "grpo_trm_turn": Arm("grpo", "trm", "turn"),
    "grpo_orm": Arm("grpo", "orm", "none"),
    "grpo_oracle_turn": Arm("grpo", "oracle", "turn"),
    "ppo_outcome": Arm("ppo", "outcome", "none"),
    "ppo_trm": Arm("ppo", "trm", "none"),
}


class CallTable(NamedTuple):
    """Per row n and step t of a rollout (N, T): is_call (a tool call, not the answer), call_positions (last
    action token, -1 where not a scored call), obs_ends (last observation token, -1 where none), the exact
    labels quality / necessity / product; per row: final_positions (last policy token), outcome (1 right)."""

    is_call: np.ndarray
    call_positions: np.ndarray
    obs_ends: np.ndarray
    quality: np.ndarray
    necessity: np.ndarray
    product: np.ndarray
    well_formed: np.ndarray
    final_positions: np.ndarray
    outcome: np.ndarray


def call_table(world: World, questions: Sequence[Question], roll: Rollout) -> CallTable:
    """Find and label every tool call of a rollout. questions[n] is row n's question. A call whose observation
    did not fit (the last turn, or out of budget) is counted and labelled but not scored (-1 positions)."""
    N, T = roll.step_positions.shape
    L = roll.tokens.shape[1]
    table = {k: np.zeros((N, T), bool) for k in ("is_call", "quality", "necessity", "product", "well_formed")}
    call_positions = np.full((N, T), -1, np.int32)
    obs_ends = np.full((N, T), -1, np.int32)
    final = np.zeros((N,), np.int32)
    for n in range(N):
        labels, _ = world.label_calls(questions[n], roll.texts[n])
        policy_cols = np.flatnonzero(roll.policy[n])
        final[n] = policy_cols[-1] if policy_cols.size else 0
        for t, lab in enumerate(labels[:T]):
            p = int(roll.step_positions[n, t])
            table["is_call"][n, t] = True
            table["quality"][n, t], table["necessity"][n, t] = lab.quality, lab.necessity
            table["product"][n, t], table["well_formed"][n, t] = bool(lab.label), lab.well_formed
            end = p
            while p >= 0 and end + 1 < L and roll.observation[n, end + 1]:
                end += 1
            if p >= 0 and end > p:
                call_positions[n, t], obs_ends[n, t] = p, end
    return CallTable(**table, call_positions=call_positions, obs_ends=obs_ends, final_positions=final,
                     outcome=np.asarray(roll.rewards, np.float32))


def call_metrics(table: CallTable) -> dict[str, float]:
    """EM, calls per question, and among calls the necessary / good-quality / s=1 / well-formed fractions."""
    calls = table.is_call
    n = max(int(calls.sum()), 1)
    return {"exact_match": float(table.outcome.mean()), "calls_per_question": float(calls.sum(axis=1).mean()),
            "necessary_fraction": float(table.necessity[calls].sum() / n),
            "quality_fraction": float(table.quality[calls].sum() / n),
            "good_call_fraction": float(table.product[calls].sum() / n),
            "well_formed_fraction": float(table.well_formed[calls].sum() / n)}


class TRMTrainer(RLTrainer):
    """`RLTrainer` whose advantages come from the arm's per-call rewards. trm: (graphdef, params) of the frozen
    TRM (needed by the trm and orm arms); alpha scales the call rewards (after normalisation for GRPO)."""

    def __init__(self, config: RLConfig, graphdef: nnx.GraphDef, params: nnx.State, *, arm: str, alpha: float,
                 world: World, questions: Sequence[Question], trm: tuple | None = None,
                 mesh: jax.sharding.Mesh | None = None):
        if arm not in ARMS:
            raise ValueError(f"arm={arm!r}: expected one of {sorted(ARMS)}")
        self.arm, self.alpha, self.world, self.trm = ARMS[arm], float(alpha), world, trm
        if self.arm.algorithm != config.algorithm:
            raise ValueError(f"arm {arm!r} needs algorithm={self.arm.algorithm!r}, got {config.algorithm!r}")
        if self.arm.reward in ("trm", "orm") and trm is None:
            raise ValueError(f"arm {arm!r} scores calls with the TRM: expected trm=(graphdef, params)")
        tok = world.tokenizer
        env = ToolWorldEnv(world)
        super().__init__(config, graphdef, params, prompts=[tok.encode(q.text) for q in questions],
                         envs=[env] * len(questions), env_prompts=list(questions), tokenizer=tok, mesh=mesh)
        self.by_text = {q.text: q for q in questions}
        self.last_call_metrics: dict[str, float] = {}

    def restart(self, params: nnx.State, *, arm: str, alpha: float, seed: int, questions: Sequence[Question],
                trm: tuple | None = None) -> TRMTrainer:
        """Begin a new run (another arm of the same algorithm, seed, start or TRM) on this trainer, keeping its
        jitted update and scoring functions: a new RLTrainer would compile them again (tens of seconds on a
        small CPU). The loss they trace reads only what a restart keeps (algorithm, loss, model, shapes)."""
        if ARMS.get(arm, Arm("", "", "")).algorithm != self.config.algorithm:
            raise ValueError(f"arm={arm!r}: expected an arm of algorithm {self.config.algorithm!r}")
        update, scores = self._update, self._scores
        self.__init__(dataclasses.replace(self.config, seed=seed), self.graphdef, params, arm=arm, alpha=alpha,
                      world=self.world, questions=questions, trm=trm, mesh=self.mesh)
        self._update, self._scores = update, scores
        return self

    def call_rewards(self, roll: Rollout, table: CallTable) -> np.ndarray:
        """(N, T) per-call rewards: the TRM's scores at the observation ends, or the oracle's exact labels."""
        if self.arm.reward == "oracle":
            return table.product.astype(np.float32)
        if self.arm.reward in ("trm", "orm"):
            graphdef, params = self.trm
            return np.asarray(trm_scores(graphdef, params, jnp.asarray(roll.tokens), jnp.asarray(roll.attention),
                                         jnp.asarray(table.obs_ends)))
        return np.zeros(table.is_call.shape, np.float32)

    def advantages(self, batch: dict[str, jax.Array], roll: Rollout) -> dict[str, jax.Array]:
        questions = [self.by_text[self.world.tokenizer.decode(roll.tokens[n, :roll.prompt_lengths[n]])]
                     for n in range(len(roll.group))]
        table = call_table(self.world, questions, roll)
        self.last_call_metrics = call_metrics(table)
        rewards = self.call_rewards(roll, table)
        scored = table.call_positions >= 0
        self.last_call_metrics["mean_call_reward"] = float(rewards[scored].mean()) if scored.any() else 0.0
        a = self.arm
        if a.algorithm == "ppo":
            step_rewards = roll.step_rewards if a.reward == "outcome" else np.asarray(credit.ppo_step_rewards(
                roll.step_rewards, rewards, scored, alpha=self.alpha))
            return super().advantages(batch, roll._replace(step_rewards=step_rewards))
        num_groups = int(roll.group.max()) + 1
        if a.reward == "orm":
            score = np.where(scored, rewards, 0.0).sum(1) / np.maximum(scored.sum(1), 1)
            adv = credit.trajectory_advantages(table.outcome, score, roll.group, roll.policy, num_groups=num_groups,
                                               alpha=self.alpha)
        else:
            adv = credit.grpo_token_advantages(table.outcome, rewards, table.call_positions, table.final_positions,
                                               roll.group, roll.policy, num_groups=num_groups, level=a.level,
                                               alpha=self.alpha, gamma=self.config.gamma)
        return {**batch, "advantages": self._place({"a": np.asarray(adv)})["a"]}

    def step(self, step: int) -> dict[str, float]:
        record = super().step(step)
        record.update({f"calls/{k}": v for k, v in self.last_call_metrics.items()})
        return record


def evaluate(graphdef: nnx.GraphDef, params: nnx.State, world: World, questions: Sequence[Question],
             rollout_config: RolloutConfig, key: jax.Array) -> dict[str, float]:
    """Held-out metrics of a policy: sampled (rollout_config's temperature, G samples per question) EM, calls
    per question and call fractions, in one rollout."""
    tok = world.tokenizer
    env = ToolWorldEnv(world)
    roll = rollout(graphdef, params, [tok.encode(q.text) for q in questions], [env] * len(questions),
                   list(questions), tok, key, rollout_config)
    return call_metrics(call_table(world, [questions[g] for g in roll.group], roll))
