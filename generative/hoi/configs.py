"""Config and presets of RMD-lite: PPO on the pure-JAX 2D scene or the MJX scene with three rewards (compiled
RMD, hand-engineered, chain-of-contacts) over four tasks.

Presets (2 shared CPU cores):
- `tiny`: `iclr26 run hoi --preset tiny` (seconds after the compile): 2 updates of 16 envs, numbers meaningless.
- `demo`: `iclr26 run hoi --preset demo` (6 min 6 s measured at load 14-20): every task x every arm, one seed,
  256 envs x 80 steps, 15 updates (0.3 M env steps per run, 12 runs in one jit); completion, stability and frame
  strips in the run folder. Completion stays low at this budget; the numbers are a tour, the benchmark is the claim.
- `paper`: the GPU setting of the issue on the MJX scene (`scene="mjx"`, extra `hoi`): push, open and
  open-then-push (carry needs a lift the top-down MJX scene does not have; `--set scene=2d` runs all four on the 2D
  scene), 4096 envs x 100 steps x 250 updates (~100 M env steps per run), 5 seeds. Defined, not run here (no GPU).
"""

from __future__ import annotations

import dataclasses

from core.config import check
from generative.hoi.env import ARMS, SCENES, TASKS
from generative.hoi.scene_mjx import TIMESTEP as MJX_TIMESTEP


@dataclasses.dataclass(frozen=True, kw_only=True)
class HOIConfig:
    tasks: tuple[str, ...] = tuple(TASKS)  # tasks to train: push, carry, open, open_push
    command: str = ""  # a command of the template grammar to train on instead of `tasks` (arms rmd / coc)
    arms: tuple[str, ...] = ARMS  # reward arms to train: rmd (compiled RMD), hand (engineered), coc (chain of contacts)
    scene: str = "2d"  # physics: "2d" (pure JAX, every task) or "mjx" (MuJoCo MJX, extra `hoi`; no carry: no lift)
    seeds: int = 5  # per task x arm; all runs train together in one vmapped jit
    n_envs: int = 4096  # parallel environments per run
    horizon: int = 100  # episode length = rollout length (episodes reset every update)
    updates: int = 250  # PPO updates per run (rounded up to whole chunks)
    chunk: int = 10  # updates per jitted call (the progress bar ticks per chunk)
    epochs: int = 4  # PPO epochs over each rollout
    minibatches: int = 4  # minibatches per PPO epoch (divides n_envs * horizon)
    gamma: float = 0.99  # discount factor
    lam: float = 0.95  # GAE lambda
    clip: float = 0.2  # PPO ratio clip epsilon
    vf_coef: float = 0.5  # value-loss coefficient
    ent_coef: float = 0.0  # entropy-bonus coefficient
    lr: float = 3e-4  # Adam learning rate (start of the linear anneal when anneal_lr)
    anneal_lr: bool = True  # anneal the learning rate linearly to 0 over training
    max_grad_norm: float = 0.5  # global gradient-norm clip
    hidden: int = 64  # width of the policy's and the value net's two hidden layers
    eval_envs: int = 256  # fresh-start episodes of the mean-action policy at evaluation
    dt: float = 0.05  # environment step, in seconds
    substeps: int = 4  # physics substeps per environment step (dt / substeps <= 0.015 s)
    strip_frames: int = 8  # frames per rendered frame strip (PNG, seed 0 of each task x arm)
    seed: int = 0

    def __post_init__(self):
        check(len(self.tasks) > 0 and all(t in TASKS for t in self.tasks), "tasks", self.tasks,
              f"a non-empty subset of {tuple(TASKS)}")
        if self.command:
            from generative.hoi.planner import TemplatePlanner
            TemplatePlanner()(self.command)  # BadInputError names the part that does not parse
            check("hand" not in self.arms, "arms", self.arms, "rmd / coc only with a custom command (no hand reward)")
        check(len(self.arms) > 0 and all(a in ARMS for a in self.arms), "arms", self.arms,
              f"a non-empty subset of {ARMS}")
        check(self.scene in SCENES, "scene", self.scene, f"one of {SCENES}")
        if self.scene == "mjx":
            check("carry" not in self.tasks or self.command, "tasks", self.tasks,
                  "no carry with scene='mjx' (the top-down MJX scene cannot lift the box over the table)")
            check(abs(self.dt / MJX_TIMESTEP - round(self.dt / MJX_TIMESTEP)) < 1e-6, "dt", self.dt,
                  f"a multiple of the MJX physics step {MJX_TIMESTEP} s with scene='mjx'")
        for name in ("seeds", "n_envs", "horizon", "updates", "chunk", "epochs", "minibatches", "hidden",
                     "eval_envs", "substeps"):
            check(getattr(self, name) > 0, name, getattr(self, name), "> 0")
        check(self.n_envs * self.horizon % self.minibatches == 0, "minibatches", self.minibatches,
              f"a divisor of n_envs * horizon = {self.n_envs * self.horizon}")
        check(0 < self.gamma <= 1, "gamma", self.gamma, "in (0, 1]")
        check(0 <= self.lam <= 1, "lam", self.lam, "in [0, 1]")
        check(0 < self.clip < 1, "clip", self.clip, "in (0, 1)")
        check(self.lr > 0, "lr", self.lr, "> 0")
        check(0 < self.dt <= 0.1, "dt", self.dt, "in (0, 0.1] s (penalty contacts need small steps)")
        check(self.dt / self.substeps <= 0.015, "substeps", self.substeps,
              f">= {self.dt / 0.015:.1f} so that dt / substeps <= 0.015 s (stiff contacts)")
        check(self.strip_frames >= 2, "strip_frames", self.strip_frames, ">= 2")

    @property
    def task_names(self) -> tuple[str, ...]:
        return (self.command,) if self.command else self.tasks

    @property
    def n_updates(self) -> int:
        """updates rounded up to whole chunks."""
        return -(-self.updates // self.chunk) * self.chunk

    @property
    def env_steps_per_run(self) -> int:
        return self.n_updates * self.n_envs * self.horizon


def presets() -> dict[str, HOIConfig]:
    tiny = HOIConfig(tasks=("push", "open"), arms=("rmd", "hand"), seeds=1, n_envs=16, horizon=20, updates=2,
                     chunk=1, epochs=1, minibatches=2, eval_envs=8, strip_frames=3)
    demo = HOIConfig(seeds=1, n_envs=256, horizon=80, updates=15, chunk=5, eval_envs=256)
    paper = HOIConfig(scene="mjx", tasks=("push", "open", "open_push"))
    return {"tiny": tiny, "demo": demo, "paper": paper}
