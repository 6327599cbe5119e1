"""Configs for PhaseFormer and the SparseTSF / DLinear baselines on the long-term forecasting protocol.

Per-setting presets (``etth1_96`` ... ``ettm2_720``) equal the released PhaseFormer configurations
(latent dim D, routing layers, routers R; lr; batch) listed in the method notes; ``sparsetsf_<setting>`` and
``dlinear_<setting>`` are the baselines on the same pipeline. Commands and expected results:

- ``iclr26 run phaseformer --preset tiny``  (seconds; a 2-epoch smoke run on a slice of ETTh1)
- ``iclr26 run phaseformer --preset demo``  (ETTh1-96, 3 epochs; measured test MSE 0.379 / MAE 0.396 in 33 s
  wall on the idle 2-core machine, 2026-12-01; plots forecast.png)
- ``iclr26 run phaseformer --preset etth1_96``  (full training, up to 30 epochs; paper test MSE 0.359)

Weather / Electricity / Traffic (``weather_96`` ... ``traffic_720``): the released ``run_weather.py``,
``run_electricity.py``, ``run_traffic.py`` of ``neumyor/PhaseFormer`` (HEAD), batch 16; these files do not ship, so
the presets read the user's CSV (Time-Series-Library layout, 70/10/20 split by rows) and check its variable count::

    iclr26 run phaseformer --preset electricity_96 --set dataset=/data/electricity.csv --workdir runs/pf_ecl96

``PAPER_RESULTS`` holds the paper's test MSE / MAE of every setting (L = 720); ``LARGE_PRESETS`` the table of the
large-dataset presets. ETTh presets exist at both released batch sizes: ``etth1_96`` (batch 16, the first release,
used for the results table) and ``etth1_96_b256`` (batch 256, the released HEAD scripts).

Known ambiguities are explicit options: ``weights`` ("best" = best-validation checkpoint as in the TSL port,
"last" = last-epoch weights as in the Lightning code; the benchmark uses "best"), and the ETTm1 layer counts
(``ettm1_layers="released"``: 2, 2, 1, 2 layers for H = 96, 192, 336, 720; ``"variant"``: 1, 1, 2, 1).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Literal

from core.config import BadInputError, check

DATASETS = ("ETTh1", "ETTh2", "ETTm1", "ETTm2")
HORIZONS = (96, 192, 336, 720)

# (latent_dim, layers, routers) of the released PhaseFormer configurations, L = 720.
RELEASED = {
    ("ETTh1", 96): (4, 3, 8), ("ETTh1", 192): (4, 3, 8), ("ETTh1", 336): (4, 3, 8), ("ETTh1", 720): (8, 1, 8),
    ("ETTh2", 96): (8, 1, 8), ("ETTh2", 192): (8, 1, 8), ("ETTh2", 336): (8, 1, 8), ("ETTh2", 720): (4, 1, 4),
    ("ETTm1", 96): (8, 2, 8), ("ETTm1", 192): (8, 2, 8), ("ETTm1", 336): (8, 1, 8), ("ETTm1", 720): (8, 2, 8),
    ("ETTm2", 96): (8, 2, 8), ("ETTm2", 192): (8, 1, 8), ("ETTm2", 336): (8, 1, 8), ("ETTm2", 720): (8, 1, 8),
}
# The large datasets: (file name the released scripts read, number of variables).
LARGE_DATASETS = {"Weather": ("weather.csv", 21), "Electricity": ("electricity.csv", 321),
                  "Traffic": ("traffic.csv", 862)}
# (latent_dim, layers, routers, heads, lr) of run_weather.py / run_electricity.py / run_traffic.py at HEAD (their
# last change, Oct 2025). The scripts' phase_encoder_hidden / predictor_hidden are unused (no MLP embedding or
# predictor), and Traffic-96's phase_attn_window / phase_use_pos_embed=False entries are overridden by the script
# (window None, positional embedding on), so neither appears here.
RELEASED_LARGE = {
    ("Weather", 96): (8, 3, 8, 1, 1e-3), ("Weather", 192): (8, 2, 8, 1, 1e-3),
    ("Weather", 336): (8, 2, 8, 1, 1e-3), ("Weather", 720): (8, 2, 8, 1, 1e-3),
    # Electricity-96: the first release had 4 routers and lr 1e-3; HEAD (used here) 8 routers and lr 2e-3
    ("Electricity", 96): (8, 2, 8, 1, 2e-3), ("Electricity", 192): (128, 1, 4, 4, 1e-3),
    ("Electricity", 336): (8, 2, 8, 1, 1e-3), ("Electricity", 720): (128, 1, 4, 4, 1e-3),
    ("Traffic", 96): (32, 2, 1, 8, 1e-3), ("Traffic", 192): (128, 1, 4, 4, 1e-3),
    ("Traffic", 336): (128, 1, 4, 4, 1e-3), ("Traffic", 720): (128, 1, 4, 4, 1e-3),
}
# The paper's test MSE / MAE at L = 720 (its main table), every dataset and horizon.
PAPER_RESULTS = {
    ("ETTh1", 96): (0.359, 0.382), ("ETTh1", 192): (0.397, 0.404), ("ETTh1", 336): (0.425, 0.424),
    ("ETTh1", 720): (0.431, 0.450),
    ("ETTh2", 96): (0.275, 0.338), ("ETTh2", 192): (0.341, 0.376), ("ETTh2", 336): (0.369, 0.405),
    ("ETTh2", 720): (0.402, 0.436),
    ("ETTm1", 96): (0.293, 0.344), ("ETTm1", 192): (0.323, 0.361), ("ETTm1", 336): (0.358, 0.381),
    ("ETTm1", 720): (0.412, 0.410),
    ("ETTm2", 96): (0.163, 0.256), ("ETTm2", 192): (0.219, 0.293), ("ETTm2", 336): (0.269, 0.326),
    ("ETTm2", 720): (0.351, 0.379),
    ("Weather", 96): (0.148, 0.195), ("Weather", 192): (0.193, 0.237), ("Weather", 336): (0.242, 0.278),
    ("Weather", 720): (0.309, 0.332),
    ("Electricity", 96): (0.129, 0.221), ("Electricity", 192): (0.148, 0.238), ("Electricity", 336): (0.165, 0.257),
    ("Electricity", 720): (0.201, 0.285),
    ("Traffic", 96): (0.361, 0.238), ("Traffic", 192): (0.373, 0.243), ("Traffic", 336): (0.385, 0.248),
    ("Traffic", 720): (0.428, 0.270),
}
ETTH1_720_LR = 1e-4  # the released script's lr for ETTh1-720 (1.5e-4 belongs to the authors' later 32/3/16 config)
ETTM1_VARIANT_LAYERS = {96: 1, 192: 1, 336: 2, 720: 1}
# Analytic parameter counts of the released configurations (method notes).
PAPER_PARAMS = {
    ("ETTh1", 96): 2072, ("ETTh1", 192): 2092, ("ETTh1", 336): 2122, ("ETTh1", 720): 1950,
    ("ETTh2", 96): 1716, ("ETTh2", 192): 1752, ("ETTh2", 336): 1806, ("ETTh2", 720): 718,
    ("ETTm1", 96): 3666, ("ETTm1", 192): 3702, ("ETTm1", 336): 1806, ("ETTm1", 720): 3900,
    ("ETTm2", 96): 3666, ("ETTm2", 192): 1752, ("ETTm2", 336): 1806, ("ETTm2", 720): 1950,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """One training run of one model on one (dataset, horizon). Defaults: PhaseFormer on ETTh2-96 as released, except
    ``train_drop_last``: the released loader drops the last partial training batch and so do the ``phaseformer()``
    presets, while the default (used by the baselines) keeps it as a masked step, as the current TSL loader does."""

    model: Literal["phaseformer", "sparsetsf", "dlinear"] = "phaseformer"  # PhaseFormer, or a linear baseline
    dataset: str = "ETTh1"            # an ETT name (shipped) or a path to a CSV in the same layout
    split: Literal["auto", "ett_hour", "ett_minute", "ratio"] = "auto"  # auto: ETT 12/4/4-month split, else 70/10/20
    num_channels: int = 0             # variables the CSV must have (0: any); the large-dataset presets: 21 / 321 / 862
    seq_len: int = 720                # look-back window L, in time steps
    pred_len: int = 96                # forecast horizon H, in time steps
    # PhaseFormer
    period: int = 24                  # P = 24 for every dataset, as in the paper (even for 15-minute data)
    latent_dim: int = 8               # latent dim D of the embedded phase tokens
    num_layers: int = 1               # routing layers
    num_routers: int = 8              # routers R per routing layer
    num_heads: int = 1                # the released scripts' phase_attn_heads (1 on every ETT setting)
    dropout: float = 0.1              # dropout in the routing layers (attention and residuals)
    revin_eps: float = 1e-5           # epsilon of the RevIN instance normalisation
    use_kernel: bool = False          # the fused Pallas routing kernel instead of the pure-JAX reference
    kernel_block: int = 0             # series per kernel grid step; 0: 128 interpreted, 8 compiled
    kernel_interpret: bool = True     # Pallas interpret mode (required on CPU)
    # SparseTSF
    sparse_period: int = 24           # SparseTSF's period (divides seq_len): 24 for ETTh, 4 for ETTm
    # DLinear
    moving_avg: int = 25              # DLinear's moving-average kernel (odd) for the trend
    # training
    loss: Literal["huber", "mse"] = "huber"  # training and validation loss (MSE and MAE always reported)
    huber_delta: float = 1.0          # Huber loss threshold delta
    lr: float = 1e-3
    # TSL names: type1 halves per epoch, type3 x0.8 after 3
    lr_schedule: Literal["constant", "type1", "type3"] = "constant"
    batch_size: int = 16              # first release: 16 everywhere; HEAD scripts: 256 on ETTh (``*_b256`` presets)
    eval_batch_size: int = 512        # windows per validation / test batch
    epochs: int = 30
    patience: int = 8                 # early stop: epochs without a better validation loss
    weights: Literal["best", "last"] = "best"  # tested weights: best-validation epoch (TSL port) or last (Lightning)
    train_drop_last: bool = False     # drop the last partial training batch (released loader); else masked
    max_train_windows: int = 0        # 0: every training window; >0: the first n (smoke tests only)
    # score the test set after every epoch with that epoch's weights, as the released scripts print it; logged in
    # metrics.jsonl only, never used to choose a checkpoint or to stop
    epoch_test: bool = True
    data_parallel: bool = True        # on several devices, split every batch over all of them (a "data" mesh axis)
    seed: int = 2021
    plot: bool = True                 # write forecast.png and loss.png in the run folder

    def __post_init__(self):
        check(self.model in ("phaseformer", "sparsetsf", "dlinear"), "model", self.model,
              "'phaseformer', 'sparsetsf' or 'dlinear'")
        for name in ("seq_len", "pred_len", "period", "latent_dim", "num_layers", "num_routers", "num_heads",
                     "sparse_period", "moving_avg", "batch_size", "eval_batch_size", "epochs", "patience"):
            check(getattr(self, name) >= 1, name, getattr(self, name), "a positive integer")
        check(self.latent_dim % self.num_heads == 0, "latent_dim", self.latent_dim,
              f"a multiple of num_heads={self.num_heads}")
        check(0.0 <= self.dropout < 1.0, "dropout", self.dropout, "a rate in [0, 1)")
        check(self.lr > 0, "lr", self.lr, "a positive learning rate")
        check(self.huber_delta > 0, "huber_delta", self.huber_delta, "a positive number")
        check(self.kernel_block >= 0, "kernel_block", self.kernel_block, ">= 0 (0 = automatic)")
        check(self.max_train_windows >= 0, "max_train_windows", self.max_train_windows, ">= 0 (0 = all)")
        check(self.num_channels >= 0, "num_channels", self.num_channels, ">= 0 (0 = any)")
        check(self.moving_avg % 2 == 1, "moving_avg", self.moving_avg, "an odd kernel size")
        if self.model == "sparsetsf":
            check(self.seq_len % self.sparse_period == 0, "sparse_period", self.sparse_period,
                  f"a divisor of seq_len={self.seq_len}")

    @property
    def setting(self) -> str:
        name = self.dataset if self.dataset in DATASETS else pathlib.Path(self.dataset).stem
        return f"{name}-{self.pred_len}"


def phaseformer(dataset: str, horizon: int, *, ettm1_layers: str = "released", **overrides) -> Config:
    """The released PhaseFormer configuration for an ETT setting (L = 720): (D, layers, R) and lr per setting; one head,
    batch 16 and training drop_last everywhere, as in the first release of the per-dataset scripts (the ETTh scripts
    later moved to batch 256: :func:`phaseformer_b256`)."""
    if (dataset, horizon) not in RELEASED:
        raise BadInputError(f"setting {dataset}-{horizon}: expected a dataset in {DATASETS} and horizon in {HORIZONS}")
    if ettm1_layers not in ("released", "variant"):
        raise BadInputError(f"ettm1_layers={ettm1_layers!r}: expected 'released' or 'variant'")
    dim, layers, routers = RELEASED[(dataset, horizon)]
    if dataset == "ETTm1" and ettm1_layers == "variant":
        layers = ETTM1_VARIANT_LAYERS[horizon]
    lr = ETTH1_720_LR if (dataset, horizon) == ("ETTh1", 720) else 1e-3
    # The released Lightning scripts (run_etth1.py ... run_ettm2.py): one attention head, batch 16 on every dataset,
    # and a training loader that drops the last partial batch.
    fields = dict(model="phaseformer", dataset=dataset, pred_len=horizon, latent_dim=dim, num_layers=layers,
                  num_routers=routers, num_heads=1, lr=lr, batch_size=16, train_drop_last=True,
                  loss="huber", lr_schedule="constant", epochs=30, patience=8)
    fields.update(overrides)
    return Config(**fields)


def phaseformer_b256(dataset: str, horizon: int, **overrides) -> Config:
    """The released HEAD scripts' ETTh configuration: as :func:`phaseformer` (first release) but batch 256
    (run_etth1.py / run_etth2.py since Oct 2025; the model configurations are unchanged, ETTh1-720 is the (8, 1, 8)
    one at lr 1e-4, not the March 2026 D 32 search result)."""
    if not dataset.startswith("ETTh"):
        raise BadInputError(f"dataset={dataset!r}: the batch-256 scripts are ETTh1 / ETTh2 only")
    return phaseformer(dataset, horizon, **{"batch_size": 256, **overrides})


def large_dataset(dataset: str, horizon: int, **overrides) -> Config:
    """The released PhaseFormer configuration for Weather, Electricity or Traffic (L = 720): (D, layers, R, heads)
    and lr per horizon from the released scripts, batch 16, Huber loss, constant lr, 30 epochs, patience 8, training
    drop_last. ``dataset`` is the released file name (``weather.csv`` ...): pass the user's file with
    ``--set dataset=/path/to/<file>``; the file must have the dataset's number of variables."""
    if (dataset, horizon) not in RELEASED_LARGE:
        raise BadInputError(f"setting {dataset}-{horizon}: expected a dataset in {tuple(LARGE_DATASETS)} and horizon "
                            f"in {HORIZONS}")
    dim, layers, routers, heads, lr = RELEASED_LARGE[(dataset, horizon)]
    file_name, channels = LARGE_DATASETS[dataset]
    fields = dict(model="phaseformer", dataset=file_name, split="ratio", num_channels=channels, pred_len=horizon,
                  latent_dim=dim, num_layers=layers, num_routers=routers, num_heads=heads, lr=lr, batch_size=16,
                  train_drop_last=True, loss="huber", lr_schedule="constant", epochs=30, patience=8)
    fields.update(overrides)
    return Config(**fields)


def large_preset_table() -> list[dict]:
    """One row per large-dataset preset: its name, configuration, the paper's MSE / MAE and the command."""
    rows = []
    for (dataset, horizon), (dim, layers, routers, heads, lr) in RELEASED_LARGE.items():
        name = f"{dataset.lower()}_{horizon}"
        mse, mae = PAPER_RESULTS[(dataset, horizon)]
        file_name, channels = LARGE_DATASETS[dataset]
        rows.append({"preset": name, "dataset": dataset, "horizon": horizon, "channels": channels,
                     "latent_dim": dim, "layers": layers, "routers": routers, "heads": heads, "lr": lr,
                     "batch_size": 16, "paper_mse": mse, "paper_mae": mae,
                     "command": f"iclr26 run phaseformer --preset {name} --set dataset=/path/to/{file_name}"})
    return rows


LARGE_PRESETS = large_preset_table()


def sparsetsf(dataset: str, horizon: int, **overrides) -> Config:
    """SparseTSF (linear): period 24 (ETTh) or 4 (ETTm), lr 0.02 (0.03 on ETTh2, as in the released scripts), MSE,
    x0.8 per epoch after epoch 3, batch 256."""
    fields = dict(model="sparsetsf", dataset=dataset, pred_len=horizon,
                  sparse_period=24 if dataset.startswith("ETTh") else 4, lr=0.03 if dataset == "ETTh2" else 0.02,
                  loss="mse", lr_schedule="type3", batch_size=256, epochs=30, patience=5)
    fields.update(overrides)
    return Config(**fields)


def dlinear(dataset: str, horizon: int, **overrides) -> Config:
    """DLinear, shared weights, moving average 25, lr 5e-3, MSE, lr halved per epoch (TSL type1), batch 32."""
    fields = dict(model="dlinear", dataset=dataset, pred_len=horizon, moving_avg=25, lr=5e-3, loss="mse",
                  lr_schedule="type1", batch_size=32, epochs=10, patience=3)
    fields.update(overrides)
    return Config(**fields)


def presets() -> dict[str, Config]:
    table = {
        # tiny: seconds; a slice of ETTh1 with a short window; used by the tests.
        "tiny": Config(dataset="ETTh1", seq_len=96, pred_len=24, latent_dim=4, num_layers=2, num_routers=4,
                       epochs=2, patience=2, batch_size=64, eval_batch_size=256, max_train_windows=256),
        # demo: ETTh1-96 as released, 3 epochs (33 s wall measured).
        "demo": phaseformer("ETTh1", 96, epochs=3),
        "paper": phaseformer("ETTh1", 96),
    }
    for dataset in DATASETS:
        for horizon in HORIZONS:
            key = f"{dataset.lower()}_{horizon}"
            table[key] = phaseformer(dataset, horizon)
            table[f"sparsetsf_{key}"] = sparsetsf(dataset, horizon)
            table[f"dlinear_{key}"] = dlinear(dataset, horizon)
    for horizon in HORIZONS:
        table[f"ettm1_{horizon}_variant"] = phaseformer("ETTm1", horizon, ettm1_layers="variant")
        for dataset in ("ETTh1", "ETTh2"):  # the released HEAD scripts' batch 256 (the table uses batch 16)
            table[f"{dataset.lower()}_{horizon}_b256"] = phaseformer_b256(dataset, horizon)
        for dataset in LARGE_DATASETS:
            table[f"{dataset.lower()}_{horizon}"] = large_dataset(dataset, horizon)
    return table
