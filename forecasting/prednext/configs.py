"""PredNext configs: frozen keyword-only dataclasses and the presets `tiny`, `demo`, `bench`, `paper` (=`ucf101`).

Defaults follow the paper as given in the method notes where it states them (AdamW, lr 2e-3, wd 1e-4,
cosine schedule, batch 256, T = 16, heads: 2-layer MLPs with BN, hidden 128; m = 1; LIF tau 2, threshold 1,
hard reset, Sigmoid surrogate alpha 4). The paper does not state alpha (the PredNext weight); 0.5 is ours.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from core.config import check

from .data import AugmentConfig, VideoConfig
from .spiking import LIFConfig

BASES = ("simclr", "simsiam", "byol", "barlowtwins", "moco")

#: Loss switches per variant: w_pred multiplies alpha (PredNext), w_forced multiplies beta (forced
#: consistency), step / clip turn the two predictions on, cross = 1 predicts the other view's targets.
VARIANTS: dict[str, dict[str, float]] = {
    "base": {"w_pred": 0.0, "w_forced": 0.0, "step": 0.0, "clip": 0.0, "cross": 1.0},
    "prednext": {"w_pred": 1.0, "w_forced": 0.0, "step": 1.0, "clip": 1.0, "cross": 1.0},
    "forced": {"w_pred": 0.0, "w_forced": 1.0, "step": 0.0, "clip": 0.0, "cross": 1.0},
    "step_only": {"w_pred": 1.0, "w_forced": 0.0, "step": 1.0, "clip": 0.0, "cross": 1.0},
    "clip_only": {"w_pred": 1.0, "w_forced": 0.0, "step": 0.0, "clip": 1.0, "cross": 1.0},
    "same_view": {"w_pred": 1.0, "w_forced": 0.0, "step": 1.0, "clip": 1.0, "cross": 0.0},
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """`cnn`: a spiking CNN, one stage per entry of `channels` (3x3 spiking conv, stride 1 then 2), optional
    SEW residual blocks per stage; `sew_resnet18`: SEW-ResNet18 (ADD connect). Then global average pooling
    of spikes per step (the backbone feature f^t), and a 2-layer MLP projector (feature z^t = F(x^t))."""

    # backbone: the notes' small spiking CNN or SEW-ResNet18 (the paper's UCF101 net)
    arch: Literal["cnn", "sew_resnet18"] = "cnn"
    channels: tuple[int, ...] = (16, 32, 64)  # channels of each spiking-conv stage
    blocks_per_stage: int = 0  # SEW blocks after each stage's spiking conv (cnn only)
    stem_stride: int = 1  # stride of the first spiking conv (cnn only; the later stages use 2)
    in_channels: int = 1  # input image channels (1 grey, 3 RGB)
    proj_hidden: int = 256  # hidden width of the projector MLP
    proj_dim: int = 128  # projector output size (the SSL embedding)
    head_hidden: int = 128  # P_T, P_C and the SimSiam/BYOL predictor
    proj_out_bn: bool = True  # BN (no scale/shift) on the projector's output, as SimSiam's (and MoCo v3's) projector
    per_view_bn: bool = True  # each view is its own forward pass (BN statistics per view), as SimSiam's recipe
    lif: LIFConfig = LIFConfig()

    def __post_init__(self):
        check(self.arch in ("cnn", "sew_resnet18"), "model.arch", self.arch, "'cnn' or 'sew_resnet18'")
        check(len(self.channels) >= 1 and all(c >= 1 for c in self.channels), "model.channels", self.channels,
              "a non-empty tuple of positive widths")
        for name in ("in_channels", "proj_hidden", "proj_dim", "head_hidden"):
            check(getattr(self, name) >= 1, f"model.{name}", getattr(self, name), "an integer >= 1")
        check(self.stem_stride >= 1, "model.stem_stride", self.stem_stride, "an integer >= 1")
        check(self.blocks_per_stage >= 0, "model.blocks_per_stage", self.blocks_per_stage, "an integer >= 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LossConfig:
    """L = (1 - alpha w_pred) L_ssl + alpha w_pred L_pred + beta w_forced L_forced (w_*: variant switches).

    L_pred = step * mean_t 1/2 [Q(p_i^t, z_j^{t+m}) + Q(p_j^t, z_i^{t+m})] + clip * 1/2 [M(c_i, z_j*) + M(c_j, z_i*)]
    with Q, M = 1 - cos (the notes' negative cosine shifted by 1; same gradients) and stop-gradient targets.
    The step term is a mean over t (not a sum), so step and clip terms weigh the same.
    """

    # the self-supervised objective PredNext is added to
    base: Literal["simclr", "simsiam", "byol", "barlowtwins", "moco"] = "simsiam"
    alpha: float = 0.5  # PredNext weight: L = (1 - alpha) L_ssl + alpha L_pred (not stated in the paper)
    beta: float = 0.2  # weight of the forced-consistency term (the `forced` variant)
    step_offset: int = 1  # m
    temperature: float = 0.2  # InfoNCE temperature of SimCLR and MoCo (MoCo v2: 0.2)
    barlow_lambda: float = 5e-3  # Barlow Twins off-diagonal weight
    byol_momentum: float = 0.99  # EMA momentum of BYOL's target network
    moco_queue: int = 4096  # MoCo v2: negatives queue length (keys of past batches; >= 2 x batch)
    moco_momentum: float = 0.999  # MoCo v2: EMA momentum of the key encoder

    def __post_init__(self):
        check(self.base in BASES, "loss.base", self.base, f"one of {BASES}")
        check(0.0 <= self.alpha <= 1.0, "loss.alpha", self.alpha, "a number in [0, 1]")
        check(self.beta >= 0.0, "loss.beta", self.beta, "a number >= 0")
        check(self.step_offset >= 1, "loss.step_offset", self.step_offset, "an integer >= 1")
        check(self.temperature > 0, "loss.temperature", self.temperature, "a number > 0")
        check(self.barlow_lambda >= 0, "loss.barlow_lambda", self.barlow_lambda, "a number >= 0")
        check(0.0 <= self.byol_momentum < 1.0, "loss.byol_momentum", self.byol_momentum, "a number in [0, 1)")
        check(0.0 <= self.moco_momentum < 1.0, "loss.moco_momentum", self.moco_momentum, "a number in [0, 1)")
        check(self.moco_queue >= 1, "loss.moco_queue", self.moco_queue, "an integer >= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    lr: float = 2e-3
    weight_decay: float = 1e-4
    batch_size: int = 256
    steps: int = 1000
    warmup: int = 50
    seeds: int = 1  # runs per variant, trained together (vmapped) with the variants
    seed: int = 0
    log_every: int = 50
    probe_steps: int = 300  # full-batch Adam steps of the linear probe
    probe_lr: float = 0.05  # Adam learning rate of the linear probe
    eval_clips: int = 3  # clips per video, features averaged (the paper's protocol)
    finetune_steps: int = 100  # supervised fine-tuning of the pretrained backbone + a linear head (0: off)
    finetune_lr: float = 1e-3  # AdamW, cosine decay, for backbone and head
    retrieval_k: tuple[int, ...] = (1, 5)  # R@k: a test clip's k nearest train clips include its class
    fast_compile: bool = False  # XLA optimisation level 0 (tests): faster compiles, slower steps

    def __post_init__(self):
        check(self.lr > 0, "train.lr", self.lr, "a number > 0")
        check(self.weight_decay >= 0, "train.weight_decay", self.weight_decay, "a number >= 0")
        check(self.batch_size >= 2, "train.batch_size", self.batch_size, "an integer >= 2")
        check(self.steps >= 1, "train.steps", self.steps, "an integer >= 1")
        check(self.warmup >= 0, "train.warmup", self.warmup, "an integer >= 0")
        check(self.seeds >= 1, "train.seeds", self.seeds, "an integer >= 1")
        check(self.log_every >= 1, "train.log_every", self.log_every, "an integer >= 1")
        check(self.probe_steps >= 1, "train.probe_steps", self.probe_steps, "an integer >= 1")
        check(self.eval_clips >= 1, "train.eval_clips", self.eval_clips, "an integer >= 1")
        check(self.finetune_steps >= 0, "train.finetune_steps", self.finetune_steps, "an integer >= 0")
        check(self.finetune_lr > 0, "train.finetune_lr", self.finetune_lr, "a number > 0")
        check(len(self.retrieval_k) >= 1 and all(k >= 1 for k in self.retrieval_k), "train.retrieval_k",
              self.retrieval_k, "a non-empty tuple of integers >= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    data: VideoConfig = VideoConfig()
    augment: AugmentConfig = AugmentConfig()
    model: ModelConfig = ModelConfig()
    loss: LossConfig = LossConfig()
    train: TrainConfig = TrainConfig()
    # videos: generated moving digits, or UCF101 / HMDB51 frame folders
    source: Literal["moving_digits", "ucf101", "hmdb51"] = "moving_digits"
    data_root: str = ""  # frame folders <root>/<class>/<video>/*.jpg (ucf101 / hmdb51)
    split_dir: str = ""  # the dataset's split files
    frame_stride: int = 2  # keep every n-th frame of a frame-folder video
    variants: tuple[str, ...] = ("base", "prednext", "forced")  # variants trained side by side (keys of VARIANTS)

    def __post_init__(self):
        check(len(self.variants) >= 1 and all(v in VARIANTS for v in self.variants), "variants", self.variants,
              f"a non-empty tuple of {', '.join(VARIANTS)}")
        check(self.source in ("moving_digits", "ucf101", "hmdb51"), "source", self.source,
              "'moving_digits', 'ucf101' or 'hmdb51'")
        check(self.source == "moving_digits" or bool(self.data_root and self.split_dir), "data_root",
              self.data_root, f"a frame folder and split_dir with source={self.source!r}")
        check(self.source != "moving_digits" or self.train.batch_size <= self.data.n_train, "train.batch_size",
              self.train.batch_size, f"at most data.n_train={self.data.n_train}")
        check(self.loss.step_offset < self.data.clip_len, "loss.step_offset", self.loss.step_offset,
              f"less than data.clip_len={self.data.clip_len}")
        check(self.frame_stride >= 1, "frame_stride", self.frame_stride, "an integer >= 1")
        check(self.loss.base != "moco" or self.loss.moco_queue >= 2 * self.train.batch_size, "loss.moco_queue",
              self.loss.moco_queue, f">= 2 x train.batch_size = {2 * self.train.batch_size} (both views' keys are "
              "enqueued every step)")
        check(self.source == "moving_digits" or self.model.in_channels == 3, "model.in_channels",
              self.model.in_channels, f"3 with source={self.source!r} (frame folders are RGB): add "
              "--set model.in_channels=3")


def tiny() -> Config:
    """Seconds on a CPU; used by the tests. `iclr26 run prednext --preset tiny --workdir /tmp/pn`."""
    return Config(
        data=VideoConfig(n_train=32, n_test=32, canvas=16, length=12, min_size=6, max_size=8, clip_len=4,
                         future_gap=4, jitter=1),
        augment=AugmentConfig(out_size=16),
        model=ModelConfig(channels=(4, 8), proj_hidden=16, proj_dim=8, head_hidden=8),
        loss=LossConfig(base="simsiam"),
        train=TrainConfig(batch_size=8, steps=3, warmup=1, log_every=1, probe_steps=20, eval_clips=1,
                          finetune_steps=2, fast_compile=True),
        variants=("base", "prednext"),
    )


def demo() -> Config:
    """Under 40 s on 2 idle CPU cores: SimSiam base vs + PredNext, 1 seed, 40 steps (fine-tuning 20, probe 100),
    channels 8/16/32 at T = 8 on 32x32 moving digits; writes metrics.json and plots. Motion-probe accuracies stay
    well above the 12.5 % chance: 0.375 / 0.348 (base / PredNext) in one run, against 0.379 / 0.395 at the
    earlier 60 / 40 / 150 steps (38 s and 59 CPU-s against 46 s and 72 CPU-s, idle, cold cache); the comparison
    needs the benchmark's seeds.

    `iclr26 run prednext --preset demo --workdir /tmp/pn`."""
    return Config(
        data=VideoConfig(n_train=256, n_test=256),
        model=ModelConfig(channels=(8, 16, 32), stem_stride=2, proj_hidden=128, proj_dim=64, head_hidden=64),
        train=TrainConfig(batch_size=32, steps=40, warmup=6, log_every=20, eval_clips=1, probe_steps=100,
                          finetune_steps=20),
        variants=("base", "prednext"),
    )


def bench(base: str, steps: int = 500, seeds: int = 3, task: str = "motion") -> Config:
    """The benchmark's setting (benchmarks/prednext.py): the notes' small-scale model (16/32/64, T = 8, 32x32),
    batch 32, `steps` steps, base vs + PredNext vs + forced consistency, `seeds` seeds; MoCo with a 1024-key
    queue and momentum 0.99 (short runs)."""
    return Config(
        data=VideoConfig(n_train=1024, n_test=512, task=task),
        model=ModelConfig(channels=(16, 32, 64), stem_stride=2, proj_hidden=256, proj_dim=128, head_hidden=128),
        loss=LossConfig(base=base, moco_queue=1024, moco_momentum=0.99),
        train=TrainConfig(batch_size=32, steps=steps, warmup=max(1, steps // 20), seeds=seeds, log_every=50),
    )


def ucf101() -> Config:
    """The paper's UCF101 setting for GPU users: SEW-ResNet18 (ADD), T = 16, stride 2, 128x128 crops, batch 256,
    AdamW lr 2e-3 wd 1e-4, cosine; frames extracted by the user to <root>/<class>/<video>/*.jpg.

    `iclr26 run prednext --preset ucf101 --set data_root=/data/ucf101/frames --set split_dir=/data/ucf101/splits
    --workdir runs/ucf101`. Epochs: 200 in the paper = 200 * 9537 / 256 ~ 7450 steps."""
    return Config(
        data=VideoConfig(n_train=1, n_test=1, canvas=128, length=48, clip_len=16, future_gap=16, jitter=1,
                         min_size=12, max_size=16),
        augment=AugmentConfig(out_size=128, min_scale=0.5, brightness=0.4, noise=0.0),
        model=ModelConfig(arch="sew_resnet18", channels=(64, 128, 256, 512), in_channels=3, proj_hidden=2048,
                          proj_dim=128, head_hidden=128),
        loss=LossConfig(base="simsiam"),
        train=TrainConfig(batch_size=256, steps=7450, warmup=370, log_every=50),
        source="ucf101", data_root="/data/ucf101/frames", split_dir="/data/ucf101/splits",
        frame_stride=2, variants=("base", "prednext"),
    )


PRESETS = {"tiny": tiny(), "demo": demo(), "bench_simsiam": bench("simsiam"), "bench_simclr": bench("simclr"),
           "bench_moco": bench("moco"), "bench_order": bench("simsiam", task="order"),
           "ucf101": ucf101(), "paper": ucf101()}
