"""BalanceHead configs: frozen keyword-only dataclasses and the presets `tiny`, `demo`, `bench`, `paper`.

Defaults follow the paper's base model where it is known (EG3D/HyPlaneHead family: tri-plane, 64-unit
decoder MLP, 32 features, dual discriminator with the condition, NS loss + R1, GPC p = 0.7 as PanoHead);
resolutions, widths and sample counts are reduced in the CPU presets (see README).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from core.config import BadInputError, check

#: The arms of the issue's grid. Each sets which conditions the generator (g_*) and discriminator (d_*) see,
#: the GPC swap probability and the ViCiCo weight; the architecture is the same in every arm, so conditioning
#: inputs that an arm does not use are zeroed (a linear layer on a zero input is the layer without it).
MODES: dict[str, dict[str, float]] = {
    "camera": {"g_cam": 1.0, "g_sem": 0.0, "d_cam": 1.0, "d_sem": 0.0},
    "camera_semantic": {"g_cam": 1.0, "g_sem": 1.0, "d_cam": 1.0, "d_sem": 1.0},
    "semantic": {"g_cam": 0.0, "g_sem": 1.0, "d_cam": 1.0, "d_sem": 1.0},
    "none": {"g_cam": 0.0, "g_sem": 0.0, "d_cam": 1.0, "d_sem": 0.0},
}
REGIMES = ("imbalanced", "balanced")


FLAGS = ("vicico", "mbstd", "maplr")  # arm flags after the regime; "+fix" is "+mbstd+maplr" (the collapse remedy)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Arm:
    """One training run: a conditioning mode on one data regime, with or without ViCiCo, the collapse remedy
    (D's minibatch-stddev layer, the mapping network's lr multiplier) and an arm-specific GPC probability."""

    mode: Literal["camera", "camera_semantic", "semantic", "none"] = "semantic"
    regime: Literal["imbalanced", "balanced"] = "balanced"
    vicico: bool = False
    mbstd: bool = False  # D sees the minibatch standard deviation (StyleGAN2/EG3D epilogue)
    maplr: bool = False  # the mapping network learns at train.map_lr_mult x the G learning rate (EG3D 0.01)
    gpc: float | None = None  # GPC swap probability of this arm (None: train.gpc_prob)

    @property
    def fix(self) -> bool:
        return self.mbstd and self.maplr

    @property
    def name(self) -> str:
        s = f"{self.mode}/{self.regime}" + ("+vicico" if self.vicico else "")
        s += "+fix" if self.fix else ("+mbstd" if self.mbstd else "") + ("+maplr" if self.maplr else "")
        return s + (f"+gpc={self.gpc:g}" if self.gpc is not None else "")


def parse_arm(text: str) -> Arm:
    """'camera/imbalanced+fix+gpc=0.5' -> Arm(mode='camera', regime='imbalanced', mbstd=True, maplr=True, gpc=0.5).

    Flags after MODE/REGIME, in any order: +vicico, +mbstd, +maplr, +fix (= +mbstd+maplr), +gpc=P (P in [0, 1])."""
    body, *flags = text.split("+")
    mode, _, regime = body.partition("/")
    expected = (f"expected MODE/REGIME[+vicico][+fix|+mbstd|+maplr][+gpc=P] with MODE in {list(MODES)} and "
                f"REGIME in {list(REGIMES)}")
    if mode not in MODES or regime not in REGIMES:
        raise BadInputError(f"arm {text!r}: {expected}")
    kw: dict = {}
    for f in flags:
        if f in FLAGS:
            kw[f] = True
        elif f == "fix":
            kw["mbstd"] = kw["maplr"] = True
        elif f.startswith("gpc="):
            try:
                p = float(f[4:])
            except ValueError:
                p = -1.0
            if not 0 <= p <= 1:
                raise BadInputError(f"arm {text!r}: gpc={f[4:]!r}: expected a probability in [0, 1]")
            kw["gpc"] = p
        else:
            raise BadInputError(f"arm {text!r}: unknown flag {f!r}; {expected}")
    return Arm(mode=mode, regime=regime, **kw)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig:
    """HeadsLite renders: imbalanced single-view (FFHQ-like) and balanced multi-view (BalanceHead360-like)."""

    res: int = 32  # image resolution of the data and the GAN's super-resolved output
    n_images: int = 4096  # per regime (the same number of images in both regimes)
    views_per_id: int = 8  # balanced regime; the imbalanced regime has one view per identity
    frontal_fraction: float = 0.7  # imbalanced regime: share of |yaw| <= 45 deg
    back_fraction: float = 0.1  # imbalanced regime: share of |yaw| >= 135 deg (the rest are side views)
    pitch_deg: float = 20.0  # pitch band [-pitch_deg, pitch_deg]
    seed: int = 0

    def __post_init__(self):
        check(self.res in (16, 32, 64), "data.res", self.res, "16, 32 or 64")
        check(self.views_per_id >= 1, "data.views_per_id", self.views_per_id, "an integer >= 1")
        check(self.n_images >= self.views_per_id and self.n_images % self.views_per_id == 0, "data.n_images",
              self.n_images, f"a positive multiple of data.views_per_id={self.views_per_id}")
        check(0 <= self.frontal_fraction and 0 <= self.back_fraction
              and self.frontal_fraction + self.back_fraction <= 1, "data.frontal_fraction",
              (self.frontal_fraction, self.back_fraction), "fractions >= 0 summing (with back_fraction) to <= 1")
        check(0 <= self.pitch_deg <= 60, "data.pitch_deg", self.pitch_deg, "a number in [0, 60]")


@dataclasses.dataclass(frozen=True, kw_only=True)
class EncoderConfig:
    """The frozen semantic encoder (CLIP stand-in) and the metric feature encoder, both trained once."""

    sem_dim: int = 32  # embedding size (CLIP ViT-L/14: 768)
    feat_dim: int = 64  # metric feature size (Inception: 2048)
    channels: int = 32  # conv width of the two encoders
    n_train: int = 2048  # rendered heads the encoders are trained on
    steps: int = 400
    lr: float = 2e-3
    batch_size: int = 64
    fast_compile: bool = False  # XLA optimisation level 0 for the encoders: faster compiles, slower steps (tests)

    def __post_init__(self):
        for name in ("sem_dim", "feat_dim", "channels", "n_train", "steps", "batch_size"):
            check(getattr(self, name) >= 1, f"encoder.{name}", getattr(self, name), "an integer >= 1")
        check(self.lr > 0, "encoder.lr", self.lr, "a number > 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Mapping net, tri-plane synthesis, decoder MLP, volume renderer, super-resolution, dual discriminator."""

    z_dim: int = 512  # latent z size
    w_dim: int = 512  # mapping output w size (the style vector)
    map_layers: int = 8  # layers of the mapping MLP
    cond_embed: int = 512  # size of the condition embedding fed to the mapping net
    syn_channels: int = 256  # channels of the tri-plane synthesis convs
    plane_res: int = 256  # tri-plane resolution (a power of two)
    plane_channels: int = 32  # feature channels per tri-plane
    decoder_hidden: int = 64  # hidden width of the tri-plane decoder MLP
    feat_dim: int = 32  # rendered feature channels; the first 3 are the raw RGB image
    raw_res: int = 64  # neural rendering resolution; the SR stage goes from raw_res to data.res
    n_coarse: int = 48  # stratified samples per ray
    n_fine: int = 48  # importance samples per ray
    sr_channels: int = 128  # channels of the super-resolution convs
    d_channels: int = 128  # base channels of the discriminator (doubling per downsample, capped at 4x)
    d_embed: int = 256  # discriminator feature / condition-projection size
    mbstd_group: int = 4  # group size of D's minibatch-stddev layer in arms with +mbstd/+fix (EG3D 4)

    def __post_init__(self):
        for name in ("z_dim", "w_dim", "map_layers", "cond_embed", "syn_channels", "plane_channels",
                     "decoder_hidden", "n_coarse", "sr_channels", "d_channels", "d_embed", "mbstd_group"):
            check(getattr(self, name) >= 1, f"model.{name}", getattr(self, name), "an integer >= 1")
        check(self.plane_res >= 8 and (self.plane_res & (self.plane_res - 1)) == 0, "model.plane_res",
              self.plane_res, "a power of two >= 8")
        check(self.feat_dim >= 3, "model.feat_dim", self.feat_dim, "an integer >= 3 (RGB are the first 3)")
        check(self.n_fine >= 0, "model.n_fine", self.n_fine, "an integer >= 0")
        check(self.raw_res >= 4, "model.raw_res", self.raw_res, "an integer >= 4")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    steps: int = 2000
    batch_size: int = 32
    g_lr: float = 2.5e-3  # generator Adam learning rate (EG3D 0.0025)
    d_lr: float = 2e-3  # discriminator Adam learning rate (EG3D 0.002)
    beta1: float = 0.0  # Adam beta1 of both networks
    beta2: float = 0.99  # Adam beta2 of both networks
    r1_gamma: float = 1.0  # R1 gradient penalty weight on real images
    gpc_prob: float = 0.7  # generator pose conditioning: swap probability for camera-conditioned G (PanoHead)
    vicico_weight: float = 1.0  # weight of the ViCiCo term relative to the NS loss (unknown in the paper)
    map_lr_mult: float = 0.01  # lr multiplier of the mapping net and condition embedding in +maplr/+fix arms (EG3D)
    # G_ema, evaluated everywhere (StyleGAN2/EG3D): half-life ema_kimg * batch / 32 thousand images, capped at
    # ema_rampup x the images seen so far; ema_kimg=0 evaluates the raw generator
    ema_kimg: float = 10.0
    ema_rampup: float = 0.05  # G_ema half-life cap as a fraction of the images seen so far
    eval_every: int = 500
    eval_samples: int = 1024  # samples per view bin in the final evaluation (FD, z-diversity)
    curve_samples: int = 256  # samples of the FD-random evaluated during training (the curves)
    seed: int = 0
    fast_compile: bool = False  # XLA optimisation level 0: faster compiles, slower steps (tests)

    def __post_init__(self):
        check(self.steps >= 1, "train.steps", self.steps, "an integer >= 1")
        check(self.batch_size >= 2, "train.batch_size", self.batch_size, "an integer >= 2")
        for name in ("g_lr", "d_lr"):
            check(getattr(self, name) > 0, f"train.{name}", getattr(self, name), "a number > 0")
        check(0 <= self.beta1 < 1 and 0 <= self.beta2 < 1, "train.beta1", (self.beta1, self.beta2), "numbers in [0, 1)")
        check(self.r1_gamma >= 0, "train.r1_gamma", self.r1_gamma, "a number >= 0")
        check(0 <= self.gpc_prob <= 1, "train.gpc_prob", self.gpc_prob, "a number in [0, 1]")
        check(self.vicico_weight >= 0, "train.vicico_weight", self.vicico_weight, "a number >= 0")
        check(self.map_lr_mult > 0, "train.map_lr_mult", self.map_lr_mult, "a number > 0")
        check(self.ema_kimg >= 0, "train.ema_kimg", self.ema_kimg, "a number >= 0 (0: no G_ema)")
        check(self.ema_rampup > 0, "train.ema_rampup", self.ema_rampup, "a number > 0")
        check(self.eval_every >= 1, "train.eval_every", self.eval_every, "an integer >= 1")
        check(self.eval_samples >= 16, "train.eval_samples", self.eval_samples, "an integer >= 16")
        check(self.curve_samples >= 8, "train.curve_samples", self.curve_samples, "an integer >= 8")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    data: DataConfig = DataConfig(res=64)
    encoder: EncoderConfig = EncoderConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    # arms trained side by side: MODE/REGIME[+vicico][+fix|+mbstd|+maplr][+gpc=P] (see parse_arm)
    arms: tuple[str, ...] = ("camera/imbalanced", "camera/balanced", "semantic/imbalanced", "semantic/balanced",
                             "semantic/balanced+vicico")

    def __post_init__(self):
        check(len(self.arms) >= 1, "arms", self.arms, "a non-empty tuple of MODE/REGIME[+vicico]")
        for a in self.arms:
            try:
                parse_arm(a)
            except ValueError as e:
                check(False, "arms", self.arms, str(e).split(": expected ")[-1])
        if any(parse_arm(a).mbstd for a in self.arms):
            g = self.model.mbstd_group
            check(self.train.batch_size % g == 0, "model.mbstd_group", g,
                  f"a divisor of train.batch_size={self.train.batch_size} (an arm uses the minibatch-stddev layer)")
        check(self.data.res % self.model.raw_res == 0 and self.data.res >= self.model.raw_res, "model.raw_res",
              self.model.raw_res, f"a divisor of data.res={self.data.res}")


def _small_model(**kw) -> ModelConfig:
    base = dict(z_dim=32, w_dim=64, map_layers=2, cond_embed=32, syn_channels=48, plane_res=16, plane_channels=8,
                decoder_hidden=32, feat_dim=8, raw_res=16, n_coarse=12, n_fine=12, sr_channels=24,
                d_channels=32, d_embed=64)
    return ModelConfig(**{**base, **kw})


def tiny() -> Config:
    """Seconds on a CPU; used by the tests. `iclr26 run headgan --preset tiny --workdir /tmp/hg`."""
    return Config(
        data=DataConfig(res=16, n_images=128, views_per_id=4),
        encoder=EncoderConfig(sem_dim=8, feat_dim=16, channels=8, n_train=128, steps=20, batch_size=32,
                              fast_compile=True),
        model=_small_model(z_dim=8, w_dim=16, cond_embed=8, syn_channels=8, plane_res=8, plane_channels=4,
                           decoder_hidden=8, feat_dim=4, raw_res=8, n_coarse=4, n_fine=4, sr_channels=8,
                           d_channels=8, d_embed=8),
        train=TrainConfig(steps=4, batch_size=8, eval_every=2, eval_samples=16, curve_samples=16, fast_compile=True),
        arms=("camera/imbalanced", "semantic/balanced+vicico+fix"),
    )


def demo() -> Config:
    """Under a minute on 2 CPU cores: camera vs semantic conditioning on balanced data, 16 px, 256 images, 16 steps
    of batch 8 (one chunk), 64 evaluation samples per bin: a tour of the pipeline, not a test of the claim (at this
    budget the FD-random order of the two arms changes with the step count and the samples drawn; the benchmark's
    arms train 60+ steps over seeds with 1,024 samples per bin, the paper preset 200k steps). Halved for the
    five-minute `make demo` (2026-12-06, idle, cold cache: 50 s and 75 CPU-s against 65 s and 99 CPU-s at 512
    images, 32 steps and a 60-step encoder on 256 images).

    `iclr26 run headgan --preset demo --workdir /tmp/hg`; writes metrics.json, FD curves and 360-degree grids.
    Compiled at XLA's default optimisation (no `fast_compile`): at level 0 the compiles were not shorter here (30 s
    against 28 s) but the steps were, end to end, 568 s against 72 s on the idle 2-core machine.
    """
    return Config(
        data=DataConfig(res=16, n_images=256, views_per_id=8),
        encoder=EncoderConfig(sem_dim=16, feat_dim=32, channels=16, n_train=128, steps=30),
        model=_small_model(raw_res=8, plane_res=16, n_coarse=8, n_fine=8),
        train=TrainConfig(steps=16, batch_size=8, eval_every=16, eval_samples=64, curve_samples=64),
        arms=("camera/balanced", "semantic/balanced"),
    )


#: The benchmark's arms (issue 43), all on balanced multi-view data as the paper's conditioning ablation:
#: camera conditioning without and with the collapse remedy, the GPC sweep {0, 0.5, 0.7} with it, view + semantic
#: (the paper's 46.24 FID-random row), unconditional G, semantic, semantic + ViCiCo.
BENCH_ARMS = ("camera/balanced", "camera/balanced+fix", "camera/balanced+fix+gpc=0", "camera/balanced+fix+gpc=0.5",
              "camera_semantic/balanced+fix", "none/balanced+fix", "semantic/balanced+fix",
              "semantic/balanced+fix+vicico")


def bench() -> Config:
    """The benchmark's setting (benchmarks/headgan.py), sized for the loaded 2-core machine: 16 px output from 8 px
    volume rendering with 8 + 8 samples per ray, batch 8, the eight BENCH_ARMS vmapped, 60 steps (480 images per
    arm; 0.38 s per arm and step at 16 px and 0.65 s at 32 px measured 2026-12-02 at load ~3, and the machine was
    at load ~12), 1,024 evaluation samples per bin; the benchmark trains three seeds. The 32 px setting:
    `--set data.res=32 model.raw_res=16`; longer: `--steps 960 --eval-every 120`."""
    return Config(
        data=DataConfig(res=16, n_images=1024, views_per_id=8),
        encoder=EncoderConfig(sem_dim=32, feat_dim=64, channels=32, n_train=1024, steps=200),
        model=_small_model(raw_res=8, n_coarse=8, n_fine=8, d_channels=16, sr_channels=16),
        train=TrainConfig(steps=60, batch_size=8, eval_every=20, eval_samples=1024, curve_samples=128),
        arms=BENCH_ARMS,
    )


def gpu() -> Config:
    """The benchmark at 64 px on one GPU (unrun here): 32 px volume rendering with 24 + 24 samples, 3x64x64x16
    tri-planes, batch 32, 20k steps (640k images per arm), 2,048 evaluation samples per bin.
    `python benchmarks/headgan.py --preset gpu --seeds 0,1,2`."""
    return Config(
        data=DataConfig(res=64, n_images=16384, views_per_id=8),
        encoder=EncoderConfig(sem_dim=32, feat_dim=64, channels=32, n_train=4096, steps=1000),
        model=_small_model(raw_res=32, plane_res=64, plane_channels=16, syn_channels=64, decoder_hidden=64,
                           feat_dim=16, n_coarse=24, n_fine=24, sr_channels=32, d_channels=32),
        train=TrainConfig(steps=20_000, batch_size=32, eval_every=1000, eval_samples=2048, curve_samples=512),
        arms=BENCH_ARMS,
    )


def paper() -> Config:
    """The full-size EG3D-family architecture (64 px rendering to 64 px data here; 512 px in the paper): GPU.

    `iclr26 run headgan --preset paper --workdir runs/headgan`. The data are still HeadsLite renders; with
    user-supplied multi-view heads and CLIP weights this would be the real pipeline.
    """
    return Config(data=DataConfig(res=64, n_images=65536, views_per_id=8),
                  train=TrainConfig(steps=200_000, batch_size=32, eval_every=5000, eval_samples=4096))


PRESETS = {"tiny": tiny(), "demo": demo(), "bench": bench(), "gpu": gpu(), "paper": paper()}
