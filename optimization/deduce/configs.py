"""Configs and presets for DEDUCE (detect, decide, unlearn) on replay-based continual learning.

Every run of an experiment is one (arm, buffer size, seed) triple; all runs of a config are vmapped together
in one compiled program, because arms differ only in scalar hyper-parameters (see `ARMS`).
"""

from __future__ import annotations

import dataclasses

from core.config import check

DATASETS = ("split_mnist", "split_fmnist", "perm_mnist", "digits", "cifar100", "cifar10")
MNIST_DATASETS = ("split_mnist", "perm_mnist")
# test_carve: the shipped 10k MNIST test set carved per class into train/test (no download);
# standard: the 60k MNIST training set (`make benchmark-data`) for training, the 10k test set for testing
MNIST_SOURCES = ("test_carve", "standard")

UNLEARN_FORMS = ("ours", "released")
# arm name -> (base learner, LUM on, GUM on, detector, unlearning form: "ours", "released", or "" = the config's
# deduce.unlearn_form). Within "ours", the LUM step is deduce.lum_form (a static choice: paper or code).
ARMS: dict[str, tuple[str, bool, bool, str, str]] = {
    "er": ("er", False, False, "G", ""),
    "derpp": ("derpp", False, False, "G", ""),
    "ewc": ("ewc", False, False, "G", ""),
    "er_deduce": ("er", True, True, "G", ""),
    "derpp_deduce": ("derpp", True, True, "G", ""),
    "er_lum": ("er", True, False, "G", ""),
    "er_gum": ("er", False, True, "G", ""),
    "derpp_lum": ("derpp", True, False, "G", ""),
    "derpp_gum": ("derpp", False, True, "G", ""),
    "derpp_deduce_b": ("derpp", True, True, "B", ""),
    "er_deduce_rel": ("er", True, True, "G", "released"),
    "derpp_deduce_rel": ("derpp", True, True, "G", "released"),
    "derpp_lum_rel": ("derpp", True, False, "G", "released"),
    "derpp_deduce_b_rel": ("derpp", True, True, "B", "released"),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig:
    """dataset: split_mnist (shipped MNIST test set, carved into train/test), split_fmnist (Debian package
    dataset-fashion-mnist), perm_mnist, digits (scikit-learn, 8x8, for tests), cifar10/cifar100 (tfds).

    mnist_source (split_mnist, perm_mnist): "test_carve" (default, no download) or "standard" (train on the
    60k MNIST training set installed by `make benchmark-data`, test on the 10k test set; test_fraction unused)."""

    dataset: str = "split_mnist"
    classes_per_task: int = 2  # classes in each task of a split benchmark
    num_tasks: int = 5             # perm_mnist: number of permutations; split sets: must match classes
    test_fraction: float = 0.2     # split_mnist / digits: the share of each class held out for testing
    val_fraction: float = 0.0      # >0: test on a validation split carved from the training data instead
    first_tasks: int = 0           # >0: only the first k tasks (hyper-parameter selection)
    max_train_per_task: int = 0    # >0: subsample each task's training set (perm_mnist, tests)
    data_dir: str = ""             # tfds data_dir for cifar presets
    mnist_source: str = "test_carve"  # split_mnist / perm_mnist: "test_carve" or "standard" (60k train / 10k test)

    def __post_init__(self):
        check(self.dataset in DATASETS, "data.dataset", self.dataset, f"one of {DATASETS}")
        check(self.classes_per_task >= 1, "data.classes_per_task", self.classes_per_task, ">= 1")
        check(self.num_tasks >= 1, "data.num_tasks", self.num_tasks, ">= 1")
        check(0.0 < self.test_fraction < 1.0, "data.test_fraction", self.test_fraction, "in (0, 1)")
        check(0.0 <= self.val_fraction < 1.0, "data.val_fraction", self.val_fraction, "in [0, 1)")
        check(self.first_tasks >= 0, "data.first_tasks", self.first_tasks, ">= 0")
        check(self.max_train_per_task >= 0, "data.max_train_per_task", self.max_train_per_task, ">= 0")
        check(self.mnist_source in MNIST_SOURCES, "data.mnist_source", self.mnist_source, f"one of {MNIST_SOURCES}")
        check(self.mnist_source == "test_carve" or self.dataset in MNIST_DATASETS, "data.mnist_source",
              self.mnist_source, f"'test_carve' unless data.dataset is one of {MNIST_DATASETS} "
              f"(got dataset={self.dataset!r})")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """An MLP (hidden sizes) on flattened inputs, optionally after conv layers (conv channels, 3x3, stride 2)."""

    arch: str = "mlp"              # "mlp" (hidden / conv below) or "resnet18" (with batch norm; image inputs)
    hidden: tuple[int, ...] = (100, 100)   # DER's Seq-MNIST network: 784-100-100-10
    conv: tuple[int, ...] = ()  # channels of the 3x3 stride-2 conv layers before the MLP (mlp arch; () none)
    width: int = 64                # resnet18: base width nf (64 in the released code's backbone)

    def __post_init__(self):
        check(len(self.hidden) >= 1 and all(h >= 1 for h in self.hidden), "model.hidden", self.hidden,
              "at least one positive hidden size")
        check(all(c >= 1 for c in self.conv), "model.conv", self.conv, "positive channel counts")
        check(self.arch in ("mlp", "resnet18"), "model.arch", self.arch, "'mlp' or 'resnet18'")
        check(self.width >= 1, "model.width", self.width, ">= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeduceConfig:
    """DEDUCE hyper-parameters. Defaults: the paper's structure, with the released code's constants where the
    paper gives none, and GUM's rate/maturity scaled to our short streams (see README)."""

    unlearn_form: str = "ours"     # DEDUCE arms without a fixed form: "ours" (lum_form below) or "released"
    lum_form: str = "paper"        # "ours" form: "paper" Fisher-preconditioned step; "code" norm-rescaled step
    released_delta: float = 1e-4   # released form: the step is this fraction of each weight tensor's norm
    released_pull: float = 0.1     # released form: weight of sum F (theta - unlearned copy)^2, added every step
    released_weight_decay: float = 1e-4  # released form: SGD weight decay of the learn step (DEDUCE arms)
    delta: float = 1e-2            # unlearning rate (paper: delta; code: 1e-4 with a norm-rescaled step)
    epsilon: float = 0.0           # conflict threshold: conflict if <g_t, g_M> <= eps |g_t| |g_M|, eps in [-1, 0]
    conflict_batch: int = 32       # buffer samples of old tasks for g_M (code: the whole buffer)
    lum_alpha: float = 0.1         # proximal pull toward the previous-task weights in the unlearning loss
    lum_beta: float = 0.1          # Fisher regulariser of the learn step after unlearning
    fisher_damping: float = 1.0    # paper-form preconditioner 1 / (damping + F / mean F)
    code_lr: float = 0.01          # code-form LUM: SGD step of the unlearning copy
    code_noise: float = 1e-3       # code-form LUM: noise scale xi
    code_fisher_scale: float = 1e-3  # code-form LUM: 1 / (1 + scale * F)
    fisher_decay: float = 1e-5     # F <- tau F_old + F_new (code: 1e-5)
    fisher_samples: int = 256      # examples per task for the diagonal Fisher (sampled labels)
    gum_rate: float = 1e-3         # replacement rate phi (code 1e-5 with 50 epochs; scaled up for short streams)
    gum_maturity: int = 200        # units younger than this are never reset (code: 1000)
    gum_decay: float = 0.99        # EMA of the utility
    gum_gate_scale: float = 10.0   # Fisher gate sigma(scale * normalised Fisher)
    bound_c: float = 1.0           # detector B: E_T <= E_S + |1 - 2 eps(h_d)| + c |LEEP|
    bound_probe_frac: float = 0.3  # detector B: E_T after SGD on the new task for this share of a task's steps
    bound_eval_rows: int = 256     # detector B: held-out new-task rows for E_T, LEEP and the domain classifier
    domain_steps: int = 200        # detector B: gradient steps of the domain classifier

    def __post_init__(self):
        check(self.unlearn_form in UNLEARN_FORMS, "deduce.unlearn_form", self.unlearn_form,
              f"one of {UNLEARN_FORMS}")
        check(self.lum_form in ("paper", "code"), "deduce.lum_form", self.lum_form, "'paper' or 'code'")
        check(self.released_delta >= 0, "deduce.released_delta", self.released_delta, ">= 0")
        check(self.released_pull >= 0, "deduce.released_pull", self.released_pull, ">= 0")
        check(self.released_weight_decay >= 0, "deduce.released_weight_decay", self.released_weight_decay, ">= 0")
        check(0.0 < self.bound_probe_frac <= 1.0, "deduce.bound_probe_frac", self.bound_probe_frac, "in (0, 1]")
        check(self.bound_eval_rows >= 2, "deduce.bound_eval_rows", self.bound_eval_rows, ">= 2")
        check(self.delta >= 0, "deduce.delta", self.delta, ">= 0")
        check(-1.0 <= self.epsilon <= 0.0, "deduce.epsilon", self.epsilon, "in [-1, 0]")
        check(self.conflict_batch >= 1, "deduce.conflict_batch", self.conflict_batch, ">= 1")
        check(0.0 <= self.fisher_decay <= 1.0, "deduce.fisher_decay", self.fisher_decay, "in [0, 1]")
        check(self.fisher_samples >= 1, "deduce.fisher_samples", self.fisher_samples, ">= 1")
        check(0.0 <= self.gum_rate <= 1.0, "deduce.gum_rate", self.gum_rate, "in [0, 1]")
        check(self.gum_maturity >= 0, "deduce.gum_maturity", self.gum_maturity, ">= 0")
        check(0.0 <= self.gum_decay < 1.0, "deduce.gum_decay", self.gum_decay, "in [0, 1)")
        check(self.fisher_damping > 0, "deduce.fisher_damping", self.fisher_damping, "> 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    epochs: int = 1
    batch_size: int = 10           # DER's Seq-MNIST protocol: batch 10, buffer minibatch 10
    buffer_batch: int = 10  # replay-buffer examples drawn per step
    lr: float = 0.03
    der_alpha: float = 0.3         # DER++ logit-matching weight (method notes: 0.3)
    der_beta: float = 0.5          # DER++ buffer-label weight (method notes: 0.5)
    ewc_lambda: float = 10.0       # online EWC strength
    ewc_gamma: float = 1.0         # online EWC Fisher decay
    chunk_steps: int = 200         # steps per compiled scan chunk (and per checkpoint)
    checkpoint: bool = True        # with a workdir: save (state, stream position) after every chunk and resume

    def __post_init__(self):
        for name in ("epochs", "batch_size", "buffer_batch", "chunk_steps"):
            check(getattr(self, name) >= 1, f"train.{name}", getattr(self, name), "a positive integer")
        check(self.lr > 0, "train.lr", self.lr, "> 0")
        check(self.ewc_lambda >= 0, "train.ewc_lambda", self.ewc_lambda, ">= 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """A continual-learning experiment: every arm x buffer size x seed, vmapped together.

    tiny:         `iclr26 run deduce --preset tiny` (~15 s; digits 8x8, sanity only)
    demo:         `iclr26 run deduce --preset demo` (under a minute; Split MNIST, ER / DER++ / +DEDUCE)
    split_mnist:  the benchmark's main table (see benchmarks/deduce.py)
    """

    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    deduce: DeduceConfig = DeduceConfig()
    train: TrainConfig = TrainConfig()
    # methods trained side by side (baselines and DEDUCE variants)
    arms: tuple[str, ...] = ("er", "derpp", "er_deduce", "derpp_deduce")
    buffer_sizes: tuple[int, ...] = (500,)  # replay-buffer sizes, each run for every arm
    seeds: int = 5
    seed: int = 0                  # base seed; run seeds are seed, seed+1, ...

    def __post_init__(self):
        for a in self.arms:
            check(a in ARMS, "arms", a, f"one of {tuple(ARMS)}")
        check(len(self.arms) >= 1, "arms", self.arms, "at least one arm")
        check(len(self.buffer_sizes) >= 1 and all(b >= 1 for b in self.buffer_sizes), "buffer_sizes",
              self.buffer_sizes, "positive buffer sizes")
        check(self.seeds >= 1, "seeds", self.seeds, ">= 1")


PRESETS: dict[str, Config] = {
    "tiny": Config(data=DataConfig(dataset="digits", test_fraction=0.3), model=ModelConfig(hidden=(32,)),
                   deduce=DeduceConfig(fisher_samples=32, gum_maturity=20, gum_rate=1e-2, conflict_batch=16,
                                       domain_steps=20),
                   train=TrainConfig(chunk_steps=15),
                   arms=("er", "derpp_deduce"), buffer_sizes=(50,), seeds=4),
    # one seed (2026-12-06, idle, cold cache: 30 s / 48 CPU-s against 35 s / 58 at two); the benchmark pairs seeds
    "demo": Config(arms=("er", "derpp", "er_deduce", "derpp_deduce"), buffer_sizes=(500,), seeds=1,
                   train=TrainConfig(epochs=1)),
    "split_mnist": Config(arms=("er", "derpp", "er_deduce", "derpp_deduce", "derpp_lum", "derpp_gum", "ewc"),
                          buffer_sizes=(200, 500), seeds=5, train=TrainConfig(epochs=5)),
    "split_fmnist": Config(data=DataConfig(dataset="split_fmnist"),
                           arms=("er", "derpp", "er_deduce", "derpp_deduce"), buffer_sizes=(200, 500), seeds=5),
    "perm_mnist": Config(data=DataConfig(dataset="perm_mnist", num_tasks=10),
                         arms=("er", "derpp", "er_deduce", "derpp_deduce"), buffer_sizes=(200, 500), seeds=5,
                         train=TrainConfig(epochs=5)),
    # The paper's headline regime (unrun here, needs a GPU): DER++ on Seq-CIFAR-100 (10 tasks x 10 classes) with
    # ResNet-18 + batch norm, 50 epochs, batch 32, lr 0.03, alpha 0.1, beta 0.5, buffer 500, and the released
    # code's GUM constants (rate 1e-5, maturity 1000; GUM has no dense hidden layer to reset in ResNet-18 here).
    # Data: tfds cifar100 in data.data_dir, or a folder holding the cifar-100-python pickles (train, test).
    "gpu": Config(data=DataConfig(dataset="cifar100", classes_per_task=10, num_tasks=10),
                  model=ModelConfig(arch="resnet18"),
                  deduce=DeduceConfig(gum_rate=1e-5, gum_maturity=1000, fisher_samples=1024),
                  train=TrainConfig(epochs=50, batch_size=32, buffer_batch=32, lr=0.03, der_alpha=0.1,
                                    der_beta=0.5, chunk_steps=500),
                  arms=("derpp", "derpp_deduce", "derpp_deduce_rel", "derpp_lum_rel"), buffer_sizes=(500,),
                  seeds=3),
    # GPU users with tfds's cifar100 prepared: 10 tasks x 10 classes, a small conv net, 5 epochs, batch 32.
    "cifar100": Config(data=DataConfig(dataset="cifar100", classes_per_task=10, num_tasks=10),
                       model=ModelConfig(hidden=(256,), conv=(32, 64, 128)),
                       train=TrainConfig(epochs=5, batch_size=32, buffer_batch=32, lr=0.03, der_alpha=0.1,
                                         der_beta=0.5),
                       arms=("er", "derpp", "er_deduce", "derpp_deduce", "derpp_lum", "derpp_gum"),
                       buffer_sizes=(500,), seeds=3),
}
