"""An optimizer from a frozen config: optax's adamw / adam / sgd, a learning-rate schedule, global-norm clipping.

`make_optimizer(OptimizerConfig(...))` returns the optax transformation and its schedule; give the schedule to
`core.train.make_train_step(..., schedule=)` so every logged record carries the learning rate of that step.
Every piece is optax's own (`optax.adamw`, `optax.warmup_cosine_decay_schedule`, `optax.clip_by_global_norm`);
this module only names them in one validated place, so a method's config can hold one `OptimizerConfig` and
`--set optim.lr=3e-4` works the same everywhere.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import optax

from core.config import check


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    """What optimizer, at what learning rate, on what schedule, with what clipping.

    name: adamw (decoupled weight decay), adam or sgd (`weight_decay` is then coupled L2, added to the gradient
      as torch's Adam/SGD do, after clipping); `momentum` is sgd's only (0 = plain sgd).
    schedule: constant (lr; `warmup_steps` > 0 ramps linearly from 0 first), linear (lr -> end_lr at
      decay_steps), cosine (lr -> end_lr at decay_steps), warmup_cosine (0 -> lr over warmup_steps, then cosine
      to end_lr at decay_steps). `decay_steps` counts from step 0 and includes the warmup, as in optax's
      `warmup_cosine_decay_schedule`; after it the learning rate stays at end_lr.
    clip_norm: clip the gradient to this global L2 norm before the optimizer (0 = off).
    """

    name: Literal["adamw", "adam", "sgd"] = "adamw"
    lr: float = 1e-3
    schedule: Literal["constant", "linear", "cosine", "warmup_cosine"] = "constant"
    warmup_steps: int = 0
    decay_steps: int = 0
    end_lr: float = 0.0
    weight_decay: float = 0.0
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    momentum: float = 0.0
    clip_norm: float = 0.0

    def __post_init__(self):
        check(self.name in ("adamw", "adam", "sgd"), "name", self.name, "one of 'adamw', 'adam', 'sgd'")
        check(self.schedule in ("constant", "linear", "cosine", "warmup_cosine"), "schedule", self.schedule,
              "one of 'constant', 'linear', 'cosine', 'warmup_cosine'")
        check(self.lr > 0, "lr", self.lr, "a positive learning rate")
        check(self.end_lr >= 0, "end_lr", self.end_lr, "a non-negative final learning rate")
        check(self.warmup_steps >= 0, "warmup_steps", self.warmup_steps, "a non-negative number of steps")
        if self.schedule != "constant":
            check(self.decay_steps > self.warmup_steps, "decay_steps", self.decay_steps,
                  f"more than warmup_steps={self.warmup_steps} for schedule={self.schedule!r} (the step where "
                  "the learning rate reaches end_lr)")
        check(self.weight_decay >= 0, "weight_decay", self.weight_decay, "a non-negative weight decay")
        check(0 <= self.b1 < 1, "b1", self.b1, "a number in [0, 1)")
        check(0 <= self.b2 < 1, "b2", self.b2, "a number in [0, 1)")
        check(0 <= self.momentum < 1, "momentum", self.momentum, "a number in [0, 1)")
        check(self.momentum == 0 or self.name == "sgd", "momentum", self.momentum,
              f"0 for name={self.name!r} (b1 is Adam's momentum)")
        check(self.eps > 0, "eps", self.eps, "a positive epsilon")
        check(self.clip_norm >= 0, "clip_norm", self.clip_norm, "a non-negative global norm (0 = no clipping)")


def make_schedule(config: OptimizerConfig) -> optax.Schedule:
    """step -> learning rate, as described in `OptimizerConfig`."""
    lr, end, warm, total = config.lr, config.end_lr, config.warmup_steps, config.decay_steps
    if config.schedule == "warmup_cosine":
        return optax.warmup_cosine_decay_schedule(0.0, lr, warm, total, end_value=end)
    if config.schedule == "constant":
        main = optax.constant_schedule(lr)
    elif config.schedule == "linear":
        main = optax.linear_schedule(lr, end, total - warm)
    else:  # cosine; alpha is the final fraction of lr
        main = optax.cosine_decay_schedule(lr, total - warm, alpha=end / lr)
    if warm == 0:
        return main
    return optax.join_schedules([optax.linear_schedule(0.0, lr, warm), main], [warm])


def make_optimizer(config: OptimizerConfig) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """(transformation, schedule): clip (if clip_norm) -> optimizer driven by the schedule."""
    schedule = make_schedule(config)
    if config.name == "adamw":
        opt = optax.adamw(schedule, b1=config.b1, b2=config.b2, eps=config.eps, weight_decay=config.weight_decay)
    elif config.name == "adam":
        opt = optax.adam(schedule, b1=config.b1, b2=config.b2, eps=config.eps)
    else:
        opt = optax.sgd(schedule, momentum=config.momentum or None)
    parts = []
    if config.clip_norm > 0:
        parts.append(optax.clip_by_global_norm(config.clip_norm))
    if config.name != "adamw" and config.weight_decay > 0:
        parts.append(optax.add_decayed_weights(config.weight_decay))
    return (optax.chain(*parts, opt) if parts else opt), schedule
