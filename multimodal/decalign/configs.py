"""DecAlign configs: frozen keyword-only dataclasses and the presets `tiny`, `demo`, `paper` (= `mosi`).

Defaults follow the paper's MOSI setting as given in the method notes (d = 64, 8 heads, 5 layers,
K = 7 prototypes, 5 EM steps, eps = 0.1, alpha = 0.05, beta = 0.07, ct = 0.003, lr 6e-5, batch 32,
wd 0.005, 18 epochs, clip 0.6, early stop after 6 epochs, selection on validation loss).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from core.config import check

#: The ablation ladder of the issue. Each variant switches loss terms on (1) or off (0); the architecture
#: is the same in every variant, so the comparison isolates the objectives.
VARIANTS: dict[str, dict[str, float]] = {
    "baseline": {"dec": 0.0, "hetero": 0.0, "homo": 0.0, "ct": 0.0},  # cross-modal transformer + task loss
    "+dec": {"dec": 1.0, "hetero": 0.0, "homo": 0.0, "ct": 0.0},
    "+hetero": {"dec": 1.0, "hetero": 1.0, "homo": 0.0, "ct": 0.0},
    "+homo": {"dec": 1.0, "hetero": 0.0, "homo": 1.0, "ct": 0.0},
    "full": {"dec": 1.0, "hetero": 1.0, "homo": 1.0, "ct": 1.0},
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Where the data comes from: a synthetic MOSI-like generator or a user's MMSA pickle.

    With `source="synthetic"` the generator writes an MMSA-format pickle into the run folder and the same
    loader that reads real pickles reads it back, so the real-data path is the one that runs.
    """

    source: Literal["synthetic", "pickle"] = "synthetic"
    path: str = ""  # MMSA pickle (e.g. aligned_50.pkl) when source="pickle"
    n_train: int = 3000
    n_valid: int = 500
    n_test: int = 1000
    seq_len: int = 20  # MOSI: 50 (reduced for CPU)
    dim_text: int = 64  # MOSI BERT features: 768 (reduced for CPU)
    dim_audio: int = 5  # COVAREP, as MOSI
    dim_vision: int = 20  # Facet, as MOSI
    shared_dim: int = 4
    unique_dim: int = 4
    heterogeneity: float = 0.5  # 0 = modalities see the shared latent the same way, 1 = strongly warped
    noise: float = 0.5
    round_fraction: float = 0.5  # fraction of labels rounded to integers, as MOSI's mostly-integer labels
    seed: int = 0

    def __post_init__(self):
        check(self.source in ("synthetic", "pickle"), "data.source", self.source, "'synthetic' or 'pickle'")
        check(self.source != "pickle" or bool(self.path), "data.path", self.path,
              "the path of an MMSA pickle when data.source='pickle'")
        for name in ("n_train", "n_valid", "n_test", "seq_len", "dim_text", "dim_audio", "dim_vision",
                     "shared_dim", "unique_dim"):
            check(getattr(self, name) >= 1, f"data.{name}", getattr(self, name), "an integer >= 1")
        check(0.0 <= self.heterogeneity <= 1.0, "data.heterogeneity", self.heterogeneity, "a number in [0, 1]")
        check(self.noise >= 0.0, "data.noise", self.noise, "a number >= 0")
        check(0.0 <= self.round_fraction <= 1.0, "data.round_fraction", self.round_fraction, "a number in [0, 1]")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Projections (Conv1d k=1), unique/common encoders, per-modality cross-modal transformers, linear head."""

    d_model: int = 64
    num_heads: int = 8
    num_layers: int = 5
    ff_mult: int = 4
    dropout: float = 0.1
    num_outputs: int = 1  # 1 for regression (MOSI/MOSEI/SIMS), 6 for IEMOCAP classification
    proto_dim: int = 64  # width of the per-modality "distribution encoder" MLP for the homogeneity term

    def __post_init__(self):
        check(self.d_model >= 1, "model.d_model", self.d_model, "an integer >= 1")
        check(self.num_heads >= 1 and self.d_model % self.num_heads == 0, "model.num_heads", self.num_heads,
              f"a divisor of model.d_model={self.d_model}")
        check(self.num_layers >= 1, "model.num_layers", self.num_layers, "an integer >= 1")
        check(self.ff_mult >= 1, "model.ff_mult", self.ff_mult, "an integer >= 1")
        check(0.0 <= self.dropout < 1.0, "model.dropout", self.dropout, "a number in [0, 1)")
        check(self.num_outputs >= 1, "model.num_outputs", self.num_outputs, "an integer >= 1")
        check(self.proto_dim >= 1, "model.proto_dim", self.proto_dim, "an integer >= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LossConfig:
    """L = task + dec*L_dec + hetero*L_hetero + homo*L_homo + ct*SupCon (weights: the paper's MOSI config)."""

    task: Literal["mse", "l1", "ce"] = "mse"
    dec: float = 1.0
    hetero: float = 0.05
    homo: float = 0.07
    ct: float = 0.003
    temperature: float = 0.1
    num_prototypes: int = 7
    em_iters: int = 5
    var_floor: float = 1e-4
    ot_epsilon: float = 0.1
    ot_iters: int = 50
    mmd_bandwidth: float = 1.0

    def __post_init__(self):
        check(self.task in ("mse", "l1", "ce"), "loss.task", self.task, "'mse', 'l1' or 'ce'")
        for name in ("dec", "hetero", "homo", "ct"):
            check(getattr(self, name) >= 0.0, f"loss.{name}", getattr(self, name), "a weight >= 0")
        check(self.temperature > 0, "loss.temperature", self.temperature, "a number > 0")
        check(self.num_prototypes >= 1, "loss.num_prototypes", self.num_prototypes, "an integer >= 1")
        check(self.em_iters >= 1, "loss.em_iters", self.em_iters, "an integer >= 1")
        check(self.var_floor > 0, "loss.var_floor", self.var_floor, "a number > 0")
        check(self.ot_epsilon > 0, "loss.ot_epsilon", self.ot_epsilon, "a number > 0")
        check(self.ot_iters >= 1, "loss.ot_iters", self.ot_iters, "an integer >= 1")
        check(self.mmd_bandwidth > 0, "loss.mmd_bandwidth", self.mmd_bandwidth, "a number > 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    lr: float = 6e-5
    batch_size: int = 32
    weight_decay: float = 0.005
    epochs: int = 18
    clip: float = 0.6
    patience: int = 6  # early stop: epochs without a better validation loss
    seeds: int = 1  # independent runs per variant, trained together (vmapped)
    seed: int = 0
    fast_compile: bool = False  # XLA optimisation level 0: ~3x faster compiles, ~3x slower steps (tests, tiny)

    def __post_init__(self):
        check(self.lr > 0, "train.lr", self.lr, "a number > 0")
        check(self.batch_size >= 2, "train.batch_size", self.batch_size, "an integer >= 2")
        check(self.weight_decay >= 0, "train.weight_decay", self.weight_decay, "a number >= 0")
        check(self.epochs >= 1, "train.epochs", self.epochs, "an integer >= 1")
        check(self.clip > 0, "train.clip", self.clip, "a number > 0")
        check(self.patience >= 1, "train.patience", self.patience, "an integer >= 1")
        check(self.seeds >= 1, "train.seeds", self.seeds, "an integer >= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    loss: LossConfig = LossConfig()
    train: TrainConfig = TrainConfig()
    variants: tuple[str, ...] = ("full",)

    def __post_init__(self):
        check(len(self.variants) >= 1 and all(v in VARIANTS for v in self.variants), "variants",
              self.variants, f"a non-empty tuple of {', '.join(VARIANTS)}")
        check(self.batch_ok(), "train.batch_size", self.train.batch_size,
              f"at most data.n_train={self.data.n_train} and >= loss.num_prototypes={self.loss.num_prototypes}")
        check((self.loss.task == "ce") == (self.model.num_outputs > 1), "model.num_outputs", self.model.num_outputs,
              "1 with a regression task (mse/l1) and the number of classes with loss.task='ce'")

    def batch_ok(self) -> bool:
        small = self.data.source == "pickle" or self.train.batch_size <= self.data.n_train
        return small and self.train.batch_size >= self.loss.num_prototypes


def tiny() -> Config:
    """Seconds on a CPU; used by the tests. `iclr26 run decalign --preset tiny --workdir /tmp/dec`."""
    return Config(
        data=DataConfig(n_train=64, n_valid=32, n_test=32, seq_len=6, dim_text=12),
        model=ModelConfig(d_model=16, num_heads=2, num_layers=1, proto_dim=16),
        train=TrainConfig(lr=1e-3, batch_size=16, epochs=2, seeds=1, fast_compile=True),
        variants=("baseline", "full"),
    )


def demo() -> Config:
    """About a minute on 2 idle CPU cores: baseline vs full DecAlign on synthetic MOSI-like data, 2 seeds.

    `iclr26 run decalign --preset demo --workdir /tmp/dec`; writes metrics.json and PNG plots.
    """
    return Config(
        data=DataConfig(n_train=768, n_valid=192, n_test=384, seq_len=20, dim_text=64, heterogeneity=0.8),
        model=ModelConfig(d_model=32, num_heads=4, num_layers=1, proto_dim=32),
        train=TrainConfig(lr=1e-3, batch_size=32, epochs=5, patience=6, seeds=2, fast_compile=True),
        variants=("baseline", "full"),
    )


def bench(heterogeneity: float) -> Config:
    """The ablation benchmark's setting (benchmarks/decalign.py): d = 32, all five variants."""
    return Config(
        data=DataConfig(heterogeneity=heterogeneity),
        model=ModelConfig(d_model=32, num_heads=4, num_layers=2, proto_dim=32),
        train=TrainConfig(lr=1e-3, batch_size=32, epochs=10, patience=6, seeds=5),
        variants=tuple(VARIANTS),
    )


def paper() -> Config:
    """The paper's MOSI hyper-parameters; needs the user's MMSA pickle (aligned_50.pkl, 768/5/20, length 50).

    `iclr26 run decalign --preset paper --set data.path=/data/MOSI/aligned_50.pkl --workdir runs/mosi`.
    BERT fine-tuning is not reproduced: the pickle's precomputed 768-d text features are used as inputs.
    """
    return Config(data=DataConfig(source="pickle", path="MOSI/aligned_50.pkl"), variants=("full",))


PRESETS = {"tiny": tiny(), "demo": demo(), "paper": paper(), "mosi": paper()}
