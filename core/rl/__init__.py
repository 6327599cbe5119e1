"""core.rl: policy-gradient RL for `core.lm` language models (GRPO, Dr.GRPO, RLOO, PPO), multi-turn tool rollouts.

See core/rl/README.md. The `rl_toy` experiment shows the loop learning a verifiable task after SFT.
"""

from core.registry import Experiment
from core.rl.advantages import gae, group_advantages, masked_whiten, normalize_step_rewards, reward_to_go, token_rewards
from core.rl.losses import LossConfig, aggregate, clipped_surrogate, kl_estimate, policy_loss, value_loss
from core.rl.rollout import Environment, Rollout, RolloutConfig, rollout
from core.rl.trainer import RLConfig, RLTrainer


def _presets():
    from core.rl.toy import presets

    return presets()


def _run(config, workdir):
    from core.rl.toy import run

    return run(config, workdir)


EXPERIMENT = Experiment(
    name="rl_toy",
    paper=None,
    title="core.rl: GRPO and PPO raise a tiny LM's exact match on string reversal after noisy SFT",
    presets=_presets(),
    run=_run,
    runtimes={"tiny": "~1 min on 2 CPU cores", "demo": "< 5 min on 2 CPU cores (3 seeds, GRPO and PPO)"},
    in_demo=False,  # five minutes: longer than the other demos together should be (issue #45)
)

__all__ = ["Environment", "Rollout", "RolloutConfig", "rollout", "RLConfig", "RLTrainer", "LossConfig", "policy_loss",
           "value_loss", "clipped_surrogate", "kl_estimate", "aggregate", "group_advantages", "gae", "token_rewards",
           "normalize_step_rewards", "reward_to_go", "masked_whiten", "EXPERIMENT"]
