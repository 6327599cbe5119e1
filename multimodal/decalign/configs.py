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

    source: Literal["synthetic", "pickle"] = "synthetic"  # synthetic MOSI-like generator, or a user's MMSA pickle
    path: str = ""  # MMSA pickle (aligned_50.pkl, or unaligned_50.pkl / CH-SIMS unaligned_39.pkl) when source="pickle"
    n_train: int = 3000  # synthetic training clips
    n_valid: int = 500  # synthetic validation clips (early stopping and selection)
    n_test: int = 1000  # synthetic test clips
    seq_len: int = 20  # time steps per synthetic clip (MOSI: 50; reduced for CPU)
    dim_text: int = 64  # synthetic text feature width (MOSI BERT features: 768; reduced for CPU)
    dim_audio: int = 5  # synthetic audio feature width (COVAREP, as MOSI)
    dim_vision: int = 20  # synthetic vision feature width (Facet, as MOSI)
    shared_dim: int = 4  # dimension of the latent all three modalities share
    unique_dim: int = 4  # dimension of each modality's own latent
    heterogeneity: float = 0.5  # 0 = modalities see the shared latent the same way, 1 = strongly warped
    noise: float = 0.5  # sd of the Gaussian noise added to every feature
    round_fraction: float = 0.5  # fraction of labels rounded to integers, as MOSI's mostly-integer labels
    seed: int = 0
    # unaligned generator (the layout of MMSA's unaligned_*.pkl): audio and vision get their own padded lengths
    # and a per-clip length drawn uniformly in [max/2, max] (written as audio_lengths / vision_lengths)
    unaligned: bool = False  # generate MMSA's unaligned layout (audio / vision with their own lengths)
    # "bert": the text input is MMSA's `text_bert` (token ids, mask, segments), encoded by model.text_encoder
    text_input: Literal["features", "bert"] = "features"  # text as precomputed features, or BERT token ids
    seq_len_audio: int = 0  # padded audio length of unaligned synthetic data (0 = seq_len)
    seq_len_vision: int = 0  # padded vision length of unaligned synthetic data (0 = seq_len)

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
        check(self.text_input in ("features", "bert"), "data.text_input", self.text_input, "'features' or 'bert'")
        for name in ("seq_len_audio", "seq_len_vision"):
            check(getattr(self, name) >= 0, f"data.{name}", getattr(self, name), "an integer >= 0 (0 = data.seq_len)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Projections (Conv1d k=1), unique/common encoders, per-modality cross-modal transformers, linear head."""

    d_model: int = 64  # feature width after the per-modality projections
    num_heads: int = 8  # attention heads of the cross-modal transformers
    num_layers: int = 5  # layers of each cross-modal transformer
    ff_mult: int = 4  # feed-forward hidden width as a multiple of d_model
    dropout: float = 0.1  # residual-branch dropout (and input dropout when input_dropout is None)
    num_outputs: int = 1  # 1 for regression (MOSI/MOSEI/SIMS), 6 for IEMOCAP classification
    proto_dim: int = 64  # width of the per-modality "distribution encoder" MLP for the homogeneity term
    # the official code's variants (taco-group/DecAlign, trains/subNets/transformer.py and its configs):
    norm: Literal["pre", "post"] = "pre"  # "post": LN after each residual, no key/value LN, no final LN
    input_dropout: tuple[float, float, float] | None = None  # text, audio, vision input dropout (None: `dropout`)
    attn_dropout: tuple[float, float, float] = (0.0, 0.0, 0.0)  # attention-weight dropout per target modality
    relu_dropout: float = 0.0  # dropout on the feed-forward's hidden ReLU units
    embed_dropout: float = 0.0  # dropout on the positional-encoded transformer inputs
    # a HuggingFace BERT folder (config.json + model.safetensors): encodes token ids (data.text_input="bert") and
    # is fine-tuned with the model
    text_encoder: str = ""  # HF BERT folder for data.text_input="bert", fine-tuned with the model ("" = none)
    def __post_init__(self):
        check(self.d_model >= 1, "model.d_model", self.d_model, "an integer >= 1")
        check(self.num_heads >= 1 and self.d_model % self.num_heads == 0, "model.num_heads", self.num_heads,
              f"a divisor of model.d_model={self.d_model}")
        check(self.num_layers >= 1, "model.num_layers", self.num_layers, "an integer >= 1")
        check(self.ff_mult >= 1, "model.ff_mult", self.ff_mult, "an integer >= 1")
        check(0.0 <= self.dropout < 1.0, "model.dropout", self.dropout, "a number in [0, 1)")
        check(self.num_outputs >= 1, "model.num_outputs", self.num_outputs, "an integer >= 1")
        check(self.proto_dim >= 1, "model.proto_dim", self.proto_dim, "an integer >= 1")
        check(self.norm in ("pre", "post"), "model.norm", self.norm, "'pre' or 'post'")
        for name in ("input_dropout", "attn_dropout"):
            rates = getattr(self, name)
            check(rates is None and name == "input_dropout" or (len(rates) == 3 and all(0.0 <= r < 1.0 for r in rates)),
                  f"model.{name}", rates, "three rates in [0, 1) for text, audio, vision")
        for name in ("relu_dropout", "embed_dropout"):
            check(0.0 <= getattr(self, name) < 1.0, f"model.{name}", getattr(self, name), "a number in [0, 1)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LossConfig:
    """L = task + dec*L_dec + hetero*L_hetero + homo*L_homo + ct*SupCon (weights: the paper's MOSI config)."""

    task: Literal["mse", "l1", "ce"] = "mse"  # task loss: mse / l1 regression, ce classification
    dec: float = 1.0  # weight of the decoupling loss (cos^2 of unique vs common features)
    hetero: float = 0.05  # weight alpha of the heterogeneity loss (GMM prototypes + multi-marginal OT)
    homo: float = 0.07  # weight beta of the homogeneity loss (moment matching + MMD)
    ct: float = 0.003  # weight of the supervised contrastive loss on the fused representation
    temperature: float = 0.1  # temperature of the supervised contrastive loss
    num_prototypes: int = 7  # Gaussian-mixture prototypes K per modality and batch
    em_iters: int = 5  # unrolled EM steps fitting the prototypes
    var_floor: float = 1e-4  # lower bound on the prototypes' diagonal variances
    ot_epsilon: float = 0.1  # entropic regularisation eps of the multi-marginal Sinkhorn
    ot_iters: int = 50  # multi-marginal Sinkhorn iterations
    mmd_bandwidth: float = 1.0  # Gaussian-kernel bandwidth of the MMD: exp(-|a-b|^2 / (2 bandwidth))
    moment_pairs: Literal["sum", "mean"] = "sum"  # moment-matching MSE summed or averaged over the 3 modality pairs

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
        check(self.moment_pairs in ("sum", "mean"), "loss.moment_pairs", self.moment_pairs, "'sum' or 'mean'")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    lr: float = 6e-5
    batch_size: int = 32
    weight_decay: float = 0.005
    epochs: int = 18
    clip: float = 0.6  # global gradient-norm clip
    patience: int = 6  # early stop: epochs without a better validation loss
    seeds: int = 1  # independent runs per variant, trained together (vmapped)
    seed: int = 0
    fast_compile: bool = False  # XLA optimisation level 0: ~3x faster compiles, ~3x slower steps (tests, tiny)
    # "adamw": decoupled weight decay; "adam_l2": torch's Adam(weight_decay=...) as in the official trainer, the
    # decay added to the (clipped) gradient before the Adam moments
    optimizer: Literal["adamw", "adam_l2"] = "adamw"  # adamw, or adam_l2 (L2 decay in the gradient, as torch)
    # "plateau": torch ReduceLROnPlateau(mode=min, threshold 1e-4 rel) on the validation loss, once per epoch
    scheduler: Literal["none", "plateau"] = "none"  # lr schedule: constant, or cut on a validation plateau
    plateau_patience: int = 5  # plateau scheduler: epochs without improvement before the lr drops
    plateau_factor: float = 0.1  # plateau scheduler: factor the lr is multiplied by at each drop
    # a run is reported failed when its validation loss diverges: non-finite, never better than predicting the
    # training-label mean, or ending above diverge_factor x its best
    diverge_factor: float = 2.0  # a run whose final validation loss exceeds this x its best is reported failed

    def __post_init__(self):
        check(self.lr > 0, "train.lr", self.lr, "a number > 0")
        check(self.batch_size >= 2, "train.batch_size", self.batch_size, "an integer >= 2")
        check(self.weight_decay >= 0, "train.weight_decay", self.weight_decay, "a number >= 0")
        check(self.epochs >= 1, "train.epochs", self.epochs, "an integer >= 1")
        check(self.clip > 0, "train.clip", self.clip, "a number > 0")
        check(self.patience >= 1, "train.patience", self.patience, "an integer >= 1")
        check(self.seeds >= 1, "train.seeds", self.seeds, "an integer >= 1")
        check(self.optimizer in ("adamw", "adam_l2"), "train.optimizer", self.optimizer, "'adamw' or 'adam_l2'")
        check(self.scheduler in ("none", "plateau"), "train.scheduler", self.scheduler, "'none' or 'plateau'")
        check(self.plateau_patience >= 0, "train.plateau_patience", self.plateau_patience, "an integer >= 0")
        check(0.0 < self.plateau_factor < 1.0, "train.plateau_factor", self.plateau_factor, "a number in (0, 1)")
        check(self.diverge_factor > 1.0, "train.diverge_factor", self.diverge_factor, "a number > 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    loss: LossConfig = LossConfig()
    train: TrainConfig = TrainConfig()
    variants: tuple[str, ...] = ("full",)  # ablation variants to train: baseline, +dec, +hetero, +homo, full

    def __post_init__(self):
        check(len(self.variants) >= 1 and all(v in VARIANTS for v in self.variants), "variants",
              self.variants, f"a non-empty tuple of {', '.join(VARIANTS)}")
        check(self.batch_ok(), "train.batch_size", self.train.batch_size,
              f"at most data.n_train={self.data.n_train} and >= loss.num_prototypes={self.loss.num_prototypes}")
        check((self.data.text_input == "bert") == bool(self.model.text_encoder), "model.text_encoder",
              self.model.text_encoder, "a BERT folder exactly when data.text_input='bert'")
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
    """About 20 s on 2 idle CPU cores: baseline vs full DecAlign on synthetic MOSI-like data, one seed (22 s and
    31 CPU-s idle with a cold cache, against 31 s and 45 CPU-s at two; the benchmark pairs five seeds).

    `iclr26 run decalign --preset demo --workdir /tmp/dec`; writes metrics.json and PNG plots. Compiled at XLA's
    default optimisation: level 0 (`fast_compile`) saved 5 s of compiling but cost 7 s of steps (idle, cold cache:
    24-25 s against 22-23 s end to end), and with a warm cache only the steps remain.
    """
    return Config(
        data=DataConfig(n_train=768, n_valid=192, n_test=384, seq_len=20, dim_text=64, heterogeneity=0.8),
        model=ModelConfig(d_model=32, num_heads=4, num_layers=1, proto_dim=32),
        train=TrainConfig(lr=1e-3, batch_size=32, epochs=5, patience=6, seeds=1),
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


def official() -> Config:
    """The official code's MOSI variant (taco-group/DecAlign config/dec_mosi_config.json, trains/ATIO.py): post-norm
    blocks, per-modality dropout (attention 0.1 / 0 / 0 for text / audio / vision, ReLU 0.1, embedding 0.25,
    residual 0.1, no input dropout), d = 40 with 10 heads, Adam with L2 weight decay 0.005, lr 2e-4, a plateau
    scheduler (patience 5, factor 0.1), the moment loss averaged over modality pairs, early stop after 10 epochs.
    Loss weights stay the paper's (the repository's current dec_mosi_config.json sets beta = ct = 0, i.e. the
    homogeneity and SupCon terms off: `--set loss.homo=0 loss.ct=0` for that), and its causal `attn_mask` is
    not reproduced (cross-modal attention here sees every valid key). Needs the user's MMSA pickle, e.g.
    `iclr26 run decalign --preset official --set data.path=/data/MOSI/aligned_50.pkl --workdir runs/mosi_official`.
    """
    return Config(
        data=DataConfig(source="pickle", path="MOSI/aligned_50.pkl"),
        model=ModelConfig(d_model=40, num_heads=10, num_layers=5, dropout=0.1, proto_dim=40, norm="post",
                          input_dropout=(0.0, 0.0, 0.0), attn_dropout=(0.1, 0.0, 0.0), relu_dropout=0.1,
                          embed_dropout=0.25),
        loss=LossConfig(moment_pairs="mean"),
        train=TrainConfig(lr=2e-4, weight_decay=0.005, epochs=50, patience=10, clip=0.6, optimizer="adam_l2",
                          scheduler="plateau", plateau_patience=5, plateau_factor=0.1),
        variants=("full",),
    )


PRESETS = {"tiny": tiny(), "demo": demo(), "paper": paper(), "mosi": paper(), "official": official()}
