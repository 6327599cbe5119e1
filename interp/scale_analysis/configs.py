"""Configs of the scale-analysis experiment: the sampler, the five sweeps, and presets tiny / demo / paper / gpu.

The paper states no numeric d, N, P, kappa or seed counts (method notes), so `paper` is this package's
CPU-sized benchmark scale rather than a published setting; `gpu` reaches d = 128 (defined, not run here).
"""

from __future__ import annotations

import dataclasses

from core.config import check

SWEEPS = ("two_d", "two_n", "three_d", "three_n1", "kappa")
PLANTS = ("predicted", "first")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplerConfig:
    """Underdamped Langevin (BAOAB), annealed in P in both directions. Every stage (one P, one direction) runs
    for the same simulated time `sim_time` (so ~sqrt(P) more steps at large P, since eta(P) = step_size /
    sqrt(1 + curvature * P / kappa)), recorded n_records times; the first burn_frac of a stage's records are
    discarded (an extension stage keeps all its records). After both sweeps, a P whose two chains (prior start
    carried up, planted start carried down) disagree (split-R-hat >= rhat_max for some seed) is run for another
    stage from where both chains ended, up to max_extend times; a (seed, P) that still fails is marked and left
    out of every fit. With replicas > 1 those extension stages are parallel-tempering ensembles: each chain's
    end state seeds `replicas` copies on a geometric ladder of data-term inverse temperatures 1 .. beta_min,
    neighbours swap after every record, replica 0 (the posterior) is recorded, and the first burn_frac of its
    records is discarded (swaps move it at once)."""

    n_records: int = 32  # records (trace samples) per stage
    sim_time: float = 30.0  # simulated Langevin time per stage (steps = sim_time / eta(P))
    step_size: float = 0.7  # base step eta at P = 0; shrinks as 1 / sqrt(1 + curvature P / kappa)
    friction: float = 1.0  # BAOAB friction gamma
    curvature: float = 1.0  # scales how fast the step shrinks with P / kappa
    burn_frac: float = 0.5  # fraction of a stage's records discarded as burn-in
    max_extend: int = 1  # extra stages at most for a P failing split-R-hat
    rhat_max: float = 1.1  # split-R-hat cut a (seed, P) must pass to be used
    replicas: int = 1  # parallel-tempering replicas of an extension stage (1 = plain Langevin extensions)
    beta_min: float = 0.2  # the hottest replica's inverse temperature on the data term

    def __post_init__(self):
        check(self.n_records >= 4, "sampler.n_records", self.n_records, "an integer >= 4")
        check(self.sim_time > 0, "sampler.sim_time", self.sim_time, "a positive simulated time per stage")
        check(self.step_size > 0, "sampler.step_size", self.step_size, "a positive step size")
        check(self.friction > 0, "sampler.friction", self.friction, "a positive friction")
        check(self.curvature >= 0, "sampler.curvature", self.curvature, "a curvature constant >= 0")
        check(0 <= self.burn_frac < 1, "sampler.burn_frac", self.burn_frac, "a fraction in [0, 1)")
        check(int(self.n_records * (1 - self.burn_frac)) >= 4, "sampler.burn_frac", self.burn_frac,
              f"at least 4 kept records per stage (n_records={self.n_records}) for split-R-hat")
        check(self.max_extend >= 0, "sampler.max_extend", self.max_extend, "an integer >= 0")
        check(self.rhat_max > 1, "sampler.rhat_max", self.rhat_max, "an R-hat cut > 1 (e.g. 1.1)")
        check(self.replicas >= 1, "sampler.replicas", self.replicas, "an integer >= 1 (1 = no tempering)")
        check(0 < self.beta_min < 1, "sampler.beta_min", self.beta_min, "an inverse temperature in (0, 1)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """The experiment. Sweeps (run in this order; each point is one compiled program per P, vmapped over seeds):

    two_d:    two-layer, N = two_width_ratio * d, d in two_d        -> P* against d
    two_n:    two-layer, d = two_n_d, N in two_n                    -> P* and specialised count against N
    three_d:  three-layer, N1 = N2 = three_width_ratio * d          -> P* against d at proportional widths
    three_n1: three-layer, d = three_n1_d, N2 = three_n1_n2, N1 in three_n1 -> the Sp-Mag / GP-Spec transition
    kappa:    two-layer, d = kappa_d, N = kappa_width, kappa in kappa_values -> P* against kappa (P* ~ kappa)
    P runs over p_over_kappa_energy * kappa * E_min (the default: a grid centred on the predicted P* ~ kappa E,
    so that a wrong prediction shows up as a censored P*), else p_over_energy * E_min, else p_over_d * d.
    """

    seed: int = 0  # seeds the problems and every chain
    kappa: float = 0.1  # posterior noise variance: U = sum (f - y)^2 / (2 kappa) + prior (all sweeps but `kappa`)
    n_seeds: int = 3  # independent chains (teacher fixed) per point, vmapped
    n_test: int = 1024  # held-out inputs for test MSE and the alignment A_f
    n_probe: int = 128  # inputs of the kernel probes (drift, KTA)
    spec_multiple: float = 2.5         # specialist threshold in prior sds of the overlap (1/sqrt(d) in layer 1)
    planted: bool = True               # run the descending chain from a planted start (needed for R-hat)
    plant: str = "predicted"           # planted pattern: the calculator's winner, or "first"-layer specialists
    sweeps: tuple[str, ...] = SWEEPS  # which sweeps to run, in order (see the class docstring)
    # P grid as multiples of d (used when both energy grids are empty)
    p_over_d: tuple[float, ...] = (4.0, 8.0, 16.0, 32.0, 64.0)
    p_over_energy: tuple[float, ...] = ()  # P grid as multiples of E_min (used when p_over_kappa_energy is empty)
    p_over_kappa_energy: tuple[float, ...] = (30.0, 90.0, 270.0)  # P grid as multiples of kappa E_min (default grid)
    two_d: tuple[int, ...] = (8, 16, 32)  # input dimensions d of the two_d sweep
    two_width_ratio: float = 4.0  # two_d sweep width N / d
    two_n_d: int = 16  # d of the two_n sweep
    two_n: tuple[int, ...] = (64, 256)  # widths N of the two_n sweep
    three_d: tuple[int, ...] = (8, 16)  # input dimensions d of the three_d sweep
    three_width_ratio: float = 4.0  # three_d sweep widths N1 = N2 = ratio * d
    three_n1_d: int = 16  # d of the three_n1 sweep
    three_n1_n2: int = 64  # second-layer width N2 of the three_n1 sweep
    three_n1: tuple[int, ...] = (4, 64)  # first-layer widths N1 of the three_n1 sweep
    kappa_d: int = 16  # d of the kappa sweep
    kappa_width: int = 64  # width N of the kappa sweep
    kappa_values: tuple[float, ...] = (0.05, 0.1, 0.2)  # kappa values of the kappa sweep
    sampler: SamplerConfig = dataclasses.field(default_factory=SamplerConfig)  # Langevin sampler settings

    def __post_init__(self):
        check(self.kappa > 0, "kappa", self.kappa,
              "kappa > 0 (kappa = O(1); at kappa -> 0 the posterior-to-prior bound is vacuous)")
        check(len(self.kappa_values) >= 1 and all(k > 0 for k in self.kappa_values), "kappa_values",
              self.kappa_values, "a non-empty tuple of kappa > 0")
        check(self.n_seeds >= 1, "n_seeds", self.n_seeds, "an integer >= 1")
        check(self.n_test >= 2, "n_test", self.n_test, "an integer >= 2")
        check(0 < self.n_probe <= self.n_test, "n_probe", self.n_probe, f"0 < n_probe <= n_test={self.n_test}")
        check(self.spec_multiple > 0, "spec_multiple", self.spec_multiple, "a positive multiple of the prior sd")
        check(self.plant in PLANTS, "plant", self.plant, f"one of {PLANTS}")
        check(len(self.sweeps) > 0 and all(s in SWEEPS for s in self.sweeps), "sweeps", self.sweeps,
              f"a non-empty subset of {SWEEPS}")
        check(len(self.p_over_d) >= 2 and all(p > 0 for p in self.p_over_d), "p_over_d", self.p_over_d,
              "at least two positive ratios P/d")
        for name in ("p_over_energy", "p_over_kappa_energy"):
            vals = getattr(self, name)
            check(all(p > 0 for p in vals) and len(vals) != 1, name, vals,
                  "() or at least two positive multiples")
        for name in ("two_d", "three_d", "two_n", "three_n1"):
            vals = getattr(self, name)
            check(len(vals) > 0 and all(v >= 1 for v in vals), name, vals, "a non-empty tuple of integers >= 1")
        for name in ("two_n_d", "three_n1_d", "three_n1_n2", "kappa_d", "kappa_width"):
            check(getattr(self, name) >= 1, name, getattr(self, name), "an integer >= 1")
        for name in ("two_width_ratio", "three_width_ratio"):
            ratio = getattr(self, name)
            check(0 < ratio < float("inf"), name, ratio, "a positive, finite width / d ratio")
        for name, ds, ratio in (("two_d", self.two_d, self.two_width_ratio),
                                ("three_d", self.three_d, self.three_width_ratio)):
            for d in ds:
                check(round(ratio * d) >= 1, name, ds, f"dimensions with a width round({ratio} * d) >= 1")
        for d in set(self.two_d) | set(self.three_d) | {self.two_n_d, self.three_n1_d, self.kappa_d}:
            check(d <= self.n_test, "n_test", self.n_test,
                  f"at least d={d} held-out points (d larger than the data leaves the alignment undetermined)")
            check(min(round(r * d) for r in self.p_over_d) >= 1, "p_over_d", self.p_over_d,
                  f"ratios giving P >= 1 at d={d}")


def tiny() -> Config:
    """~30 CPU-seconds (compile-bound); used by the tests; numbers are not meaningful at d = 4, 8.
    `iclr26 run scale-analysis --preset tiny`."""
    return Config(n_seeds=2, n_test=128, n_probe=32, sweeps=("two_d", "three_n1"), p_over_kappa_energy=(),
                  p_over_d=(2.0, 8.0), two_d=(4, 8), two_width_ratio=1.0, three_n1_d=4, three_n1_n2=4,
                  three_n1=(4,), sampler=SamplerConfig(n_records=8, sim_time=1.0, max_extend=0))


def demo() -> Config:
    """~1-2 min on 2 cores: the two-layer P*-against-d sweep at d in {8, 16}, N = 4d, two seeds, both anneals.
    `iclr26 run scale-analysis --preset demo`."""
    return Config(n_seeds=2, n_test=512, n_probe=64, sweeps=("two_d",), two_d=(8, 16),
                  p_over_kappa_energy=(25.0, 100.0, 400.0), sampler=SamplerConfig(n_records=8, sim_time=8.0,
                                                                                   max_extend=0))


def paper() -> Config:
    """The committed CPU benchmark (issue 43's repairs), sized for a 2-core CPU shared with ~7 jobs (load ~25):
    widths N >= 4d; two layers d in {8, 16} at N = 4d and N in {64, 128} at d = 16; three layers d in {4, 8}
    at N1 = N2 = 4d and N1 in {2, 64} at N2 = 64, d = 16 (the computed boundary is N1 = 9.5; the specialist
    counts need d >= 16, where the tilt-proof cut can be passed); kappa in
    {0.05, 0.1, 0.2} at d = 8, N = 32; P over 30, 90, 270 x kappa E_min; 4 seeds, both anneals, simulated time
    90 per stage (32 records), up to two adaptive extensions (at time 30 with 3 seeds and one extension a third
    of the chains failed split-R-hat); 9 distinct points (shared points run once)."""
    return Config(n_seeds=4, sweeps=("two_d", "kappa", "three_d", "three_n1", "two_n"), two_d=(8, 16), two_n_d=16,
                  two_n=(64, 128), three_d=(4, 8), three_n1_d=16, three_n1_n2=64, three_n1=(2, 64), kappa_d=8,
                  kappa_width=32, sampler=SamplerConfig(sim_time=90.0, max_extend=2))


def gpu() -> Config:
    """Accelerator scale (defined, not run on this project's CPUs): d up to 128 at N = 4d, N up to 1,024,
    8 seeds, a wider P grid and longer stages."""
    return Config(n_seeds=8, n_test=4096, n_probe=256, p_over_kappa_energy=(12.5, 25.0, 50.0, 100.0, 200.0, 400.0),
                  two_d=(32, 64, 128), two_n_d=32, two_n=(128, 256, 512, 1024), three_d=(32, 64, 128),
                  three_n1_d=32, three_n1_n2=128, three_n1=(4, 16, 64, 256), kappa_d=32, kappa_width=128,
                  kappa_values=(0.05, 0.1, 0.2, 0.4),
                  sampler=SamplerConfig(n_records=20, sim_time=60.0, max_extend=3))


PRESETS = {"tiny": tiny(), "demo": demo(), "paper": paper(), "gpu": gpu()}
