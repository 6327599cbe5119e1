"""MMSA-format feature pickles: a schema-checked loader and a synthetic tri-modal generator that writes them.

The MMSA pickle (CMU-MOSI/MOSEI `aligned_50.pkl`, CH-SIMS `unaligned_39.pkl`, ...) is a dict
`{"train" | "valid" | "test": {"text": (N, Lt, Dt), "audio": (N, La, Da), "vision": (N, Lv, Dv),
"regression_labels": (N,), ...}}` of numpy arrays with labels in [-3, 3]; IEMOCAP-style classification data
carries integer `classification_labels`. Aligned pickles have one length L for all three modalities; unaligned
ones (MOSI `unaligned_50.pkl`: text 50, audio 375, vision 500) pad each modality to its own length and give the
valid lengths per clip as `audio_lengths` / `vision_lengths` (padding at the end); the text length comes from
`text_lengths` or the attention mask row of MMSA's `text_bert` (N, 3, Lt) (ids, mask, segment ids), else it is
the full Lt. The loader returns `text_lengths`, `audio_lengths`, `vision_lengths` (int32, at least 1) always.
Users download these files themselves (see README); nothing is downloaded here. The generator writes the same
format so the real loader is what runs in every experiment.
"""

from __future__ import annotations

import os
import pathlib
import pickle
from collections.abc import Mapping

import numpy as np

from core.config import BadInputError
from core.data import MissingInputError, input_file

SPLITS = ("train", "valid", "test")
MODALITIES = ("text", "audio", "vision")
LENGTH_KEYS = ("text_lengths", "audio_lengths", "vision_lengths")


class DataSchemaError(BadInputError):
    """An MMSA pickle does not have the expected keys, shapes or values."""


def _fail(path, where: str, msg: str):
    raise DataSchemaError(f"{path}: {where}: {msg}")


def check_split(split: Mapping, *, name: str, path: str = "<dict>", task: str = "regression",
                text_input: str = "features") -> dict[str, np.ndarray]:
    """Validate one split and return float32 text/audio/vision, float32 `labels` (N,) or int32 classes.

    With `text_input="bert"` the text is MMSA's `text_bert` (N, 3, L) returned as (N, L, 3): token id, mask,
    segment id per position (float32, exact for any vocabulary below 2^24)."""
    if not isinstance(split, Mapping):
        _fail(path, name, f"expected a dict of arrays, got {type(split).__name__}")
    if text_input == "bert":
        if "text_bert" not in split:
            _fail(path, name, f"missing key 'text_bert' (has {sorted(split)}); expected MMSA's token ids (N, 3, L) "
                  "with data.text_input='bert'")
        tb = np.asarray(split["text_bert"])
        if tb.ndim != 3 or tb.shape[1] != 3:
            _fail(path, f"{name}.text_bert", f"shape {tb.shape}: expected (N, 3, L) (token ids, mask, segment ids)")
        if not np.all(tb == np.round(tb)) or tb.min(initial=0) < 0:
            _fail(path, f"{name}.text_bert", "expected non-negative integer ids, masks and segment ids")
        split = {**split, "text": np.transpose(tb, (0, 2, 1))}
    label_key = "regression_labels" if task == "regression" else "classification_labels"
    for key in (*MODALITIES, label_key):
        if key not in split:
            _fail(path, name,
                  f"missing key {key!r} (has {sorted(split)}); expected {', '.join((*MODALITIES, label_key))}")
    out = {}
    n = None
    for m in MODALITIES:
        x = np.asarray(split[m])
        if not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
            _fail(path, f"{name}.{m}", f"dtype {x.dtype}: expected numeric features")
        if x.ndim != 3:
            _fail(path, f"{name}.{m}", f"shape {x.shape}: expected (N, L, D), 3 dimensions")
        if n is None:
            n = x.shape[0]
        if x.shape[0] != n:
            _fail(path, f"{name}.{m}", f"{x.shape[0]} examples: expected {n} as in {name}.text")
        if x.shape[1] < 1:
            _fail(path, f"{name}.{m}", f"sequence length {x.shape[1]}: expected at least 1 time step")
        x = x.astype(np.float32)
        if np.isnan(x).any():
            _fail(path, f"{name}.{m}", f"{int(np.isnan(x).sum())} NaN values: expected finite features")
        # MMSA's own loader maps -inf (present in MOSI's COVAREP audio) to 0; we do the same.
        x[~np.isfinite(x)] = 0.0
        out[m] = x
    y = np.asarray(split[label_key])
    if not (np.issubdtype(y.dtype, np.number) or y.dtype == bool):
        _fail(path, f"{name}.{label_key}", f"dtype {y.dtype}: expected numeric labels")
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.shape != (n,):
        _fail(path, f"{name}.{label_key}", f"shape {y.shape}: expected ({n},)")
    if task == "regression":
        y = y.astype(np.float32)
        if not np.isfinite(y).all() or np.abs(y).max(initial=0.0) > 3.0 + 1e-6:
            _fail(path, f"{name}.{label_key}",
                  f"values in [{y.min():.3g}, {y.max():.3g}]: expected finite values in [-3, 3]")
    else:
        if not np.issubdtype(y.dtype, np.integer) and not np.all(y == np.round(y)):
            _fail(path, f"{name}.{label_key}", f"dtype {y.dtype}: expected integer class indices")
        y = y.astype(np.int32)
        if y.min(initial=0) < 0:
            _fail(path, f"{name}.{label_key}", f"minimum {y.min()}: expected class indices >= 0")
    out["labels"] = y
    for m, key in zip(MODALITIES, LENGTH_KEYS):
        out[key] = _lengths(split, m, key, n, out[m].shape[1], name, path)
    return out


def _lengths(split: Mapping, m: str, key: str, n: int, full: int, name: str, path) -> np.ndarray:
    """A modality's valid length per clip: the `<m>_lengths` array, the text_bert mask row for text, else full."""
    if key in split:
        raw = np.asarray(split[key])
        where = f"{name}.{key}"
    elif m == "text" and "text_bert" in split:
        bert = np.asarray(split["text_bert"])
        if bert.ndim != 3 or bert.shape[0] != n or bert.shape[1] != 3:
            _fail(path, f"{name}.text_bert", f"shape {bert.shape}: expected ({n}, 3, L) (token ids, mask, segments)")
        raw = bert[:, 1].sum(-1)
        where = f"{name}.text_bert mask"
    else:
        return np.full((n,), full, np.int32)
    if raw.ndim == 2 and raw.shape[1] == 1:
        raw = raw[:, 0]
    if raw.shape != (n,) or not np.issubdtype(raw.dtype, np.number) or not np.all(raw == np.round(raw)):
        _fail(path, where, f"shape {raw.shape}, dtype {raw.dtype}: expected ({n},) integer lengths")
    if raw.min(initial=0) < 0 or raw.max(initial=0) > full:
        _fail(path, where, f"values in [{raw.min()}, {raw.max()}]: expected lengths in [0, {full}] "
              f"(the padded length of {name}.{m})")
    # a clip with no frames keeps one (zero-padded) frame, so its masked mean and attention stay defined
    return np.maximum(raw.astype(np.int32), 1)


def load_mmsa(path: str | os.PathLike, *, task: str = "regression",
              text_input: str = "features") -> dict[str, dict[str, np.ndarray]]:
    """Read an MMSA pickle and return {split: {"text", "audio", "vision", "labels"}} after the schema check."""
    path = pathlib.Path(path)
    if not path.exists():
        raise MissingInputError(f"{path}: no such MMSA pickle; download e.g. MOSI/aligned_50.pkl from the MMSA "
                                "release (see multimodal/decalign/README.md) and pass data.path=...")
    input_file(path, "an MMSA feature pickle (e.g. MOSI/aligned_50.pkl)")
    try:
        with path.open("rb") as f:
            raw = pickle.load(f)
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError, ValueError, TypeError) as err:
        # a truncated or foreign file: pickle raises any of these
        raise DataSchemaError(f"{path}: not a readable pickle ({type(err).__name__}: {err}); expected an MMSA "
                              "feature pickle (e.g. MOSI/aligned_50.pkl)") from None
    if not isinstance(raw, Mapping):
        _fail(path, "top level", f"expected a dict with keys {SPLITS}, got {type(raw).__name__}")
    for s in SPLITS:
        if s not in raw:
            _fail(path, "top level", f"missing split {s!r} (has {sorted(raw)}); expected {', '.join(SPLITS)}")
    data = {s: check_split(raw[s], name=s, path=str(path), task=task, text_input=text_input) for s in SPLITS}
    dims = {m: data["train"][m].shape[2] for m in MODALITIES}
    for s in SPLITS[1:]:
        for m in MODALITIES:
            if data[s][m].shape[2:] != data["train"][m].shape[2:]:
                _fail(path, f"{s}.{m}", f"per-example shape {data[s][m].shape[1:]}: expected "
                      f"{data['train'][m].shape[1:]} as in train.{m} (dims {dims})")
    for m in MODALITIES:  # splits padded to different lengths: pad all to the longest (one compiled shape)
        longest = max(data[s][m].shape[1] for s in SPLITS)
        for s in SPLITS:
            if data[s][m].shape[1] < longest:
                data[s] = _pad_to(data[s], m, longest)
    return data


def _pad_to(split: dict, m: str, length: int) -> dict:
    """Zero-pad one modality of a split at the end to `length` steps (its valid lengths are unchanged)."""
    x = split[m]
    return {**split, m: np.pad(x, ((0, 0), (0, length - x.shape[1]), (0, 0)))}


def generate(*, n_train: int, n_valid: int, n_test: int, seq_len: int, dim_text: int, dim_audio: int,
             dim_vision: int, shared_dim: int = 4, unique_dim: int = 4, heterogeneity: float = 0.5,
             noise: float = 0.5, round_fraction: float = 0.5, seed: int = 0, unaligned: bool = False,
             seq_len_audio: int = 0, seq_len_vision: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """Synthetic tri-modal sentiment data in the MMSA pickle layout.

    Per clip: a shared latent z_s (dim `shared_dim`) and one unique latent z_m per modality. Modality m's
    sequence is x_m(t) = e_m(t) * g_m(A_m z_s + B_m z_m) + noise, where the heterogeneity knob h sets how
    differently the modalities present the same content: the warp g_m(u) = (1 - h) u + h s_m tanh(k_m u) + h o_m
    (modality-specific scale, saturation and offset) and the temporal envelope e_m(t) = (1 - h) + h b_m(t)
    (text: flat, audio: a burst at a random time, vision: a slow oscillation). The label
    y = clip(1.6 f(z_s) + 0.9 w_t.z_text + 0.5 w_a.z_audio, -3, 3) depends on shared and unique factors
    (f nonlinear); a `round_fraction` of labels is rounded to integers like MOSI's mostly-integer ratings.
    The label function is independent of h, so two heterogeneity levels pose the same prediction problem.

    Each split also carries the generating latents (`latent_shared`, `latent_text`, `latent_audio`,
    `latent_vision`) and the label before rounding (`clean_labels`), which the oracles use; the loader ignores
    them. With `unaligned=True` (MMSA's unaligned layout) audio and vision are padded to `seq_len_audio` /
    `seq_len_vision` (0 = seq_len), each clip's own length is drawn in [max/2, max], its envelope runs over its
    own length, the padding is zero, and `audio_lengths` / `vision_lengths` are written. The aligned data of a
    seed is the same with or without these extra keys (the unaligned draws use a second generator).
    """
    rng = np.random.default_rng(seed)  # host-side data generation, never in model code
    dims = {"text": dim_text, "audio": dim_audio, "vision": dim_vision}
    mix = {m: (rng.normal(size=(shared_dim, d)) / np.sqrt(shared_dim),
               rng.normal(size=(unique_dim, d)) / np.sqrt(unique_dim)) for m, d in dims.items()}
    warp = {"text": (1.0, 1.0, 0.0), "audio": (2.5, 2.0, 1.5), "vision": (0.6, 0.5, -1.0)}  # (scale, slope, offset)
    w_s = rng.normal(size=shared_dim) / np.sqrt(shared_dim)
    w_s2 = rng.normal(size=shared_dim) / np.sqrt(shared_dim)
    w_t = rng.normal(size=unique_dim) / np.sqrt(unique_dim)
    w_a = rng.normal(size=unique_dim) / np.sqrt(unique_dim)
    t = np.linspace(0.0, 1.0, seq_len)
    h = heterogeneity
    rng_u = np.random.default_rng([seed, 1])
    max_len = {"text": seq_len, "audio": seq_len_audio or seq_len, "vision": seq_len_vision or seq_len}
    out, start = {}, 0
    for split, n in zip(SPLITS, (n_train, n_valid, n_test)):
        z_s = rng.normal(size=(n, shared_dim))
        z_u = {m: rng.normal(size=(n, unique_dim)) for m in dims}
        f = np.tanh(z_s @ w_s) + 0.5 * (z_s @ w_s2) * np.abs(z_s @ w_s) / 2
        y = 1.6 * f + 0.9 * (z_u["text"] @ w_t) / 1.0 + 0.5 * (z_u["audio"] @ w_a)
        y = np.clip(y, -3.0, 3.0)
        rounded = rng.random(n) < round_fraction
        y = np.where(rounded, np.round(y), np.round(y, 1)).astype(np.float32)
        centers = rng.uniform(0.2, 0.8, size=(n, 1))
        phases = rng.uniform(0, 2 * np.pi, size=(n, 1))
        envelopes = {"text": np.ones((n, seq_len)),
                     "audio": 3.0 * np.exp(-0.5 * ((t[None] - centers) / 0.12) ** 2),
                     "vision": 1.0 + np.sin(2 * np.pi * 1.5 * t[None] + phases)}
        split_data = {}
        for m, d in dims.items():
            a, b = mix[m]
            u = z_s @ a + z_u[m] @ b  # (n, d)
            scale, slope, offset = warp[m]
            g = (1 - h) * u + h * (scale * np.tanh(slope * u) + offset)
            env = (1 - h) + h * envelopes[m]  # (n, L)
            x = env[:, :, None] * g[:, None, :] + noise * rng.normal(size=(n, seq_len, d))
            split_data[m] = x.astype(np.float32)
        if unaligned:
            for m in ("audio", "vision"):
                big = max_len[m]
                lens = rng_u.integers((big + 1) // 2, big + 1, size=n)
                x = np.zeros((n, big, dims[m]), np.float32)
                a, b = mix[m]
                u = z_s @ a + z_u[m] @ b
                scale, slope, offset = warp[m]
                g = (1 - h) * u + h * (scale * np.tanh(slope * u) + offset)
                for i, li in enumerate(lens):
                    ti = np.linspace(0.0, 1.0, li)
                    e = {"audio": 3.0 * np.exp(-0.5 * ((ti - centers[i, 0]) / 0.12) ** 2),
                         "vision": 1.0 + np.sin(2 * np.pi * 1.5 * ti + phases[i, 0])}[m]
                    env = (1 - h) + h * e
                    x[i, :li] = env[:, None] * g[i][None] + noise * rng_u.normal(size=(li, dims[m]))
                split_data[m] = x
                split_data[f"{m}_lengths"] = lens.astype(np.int64)
        split_data["regression_labels"] = y
        split_data["clean_labels"] = np.clip(1.6 * f + 0.9 * (z_u["text"] @ w_t) + 0.5 * (z_u["audio"] @ w_a),
                                             -3.0, 3.0).astype(np.float32)
        split_data["latent_shared"] = z_s.astype(np.float32)
        for m in dims:
            split_data[f"latent_{m}"] = z_u[m].astype(np.float32)
        split_data["classification_labels"] = (np.clip(np.round(y), -3, 3) + 3).astype(np.int64)  # 7 classes
        split_data["id"] = np.array([f"synthetic_{start + i}" for i in range(n)])
        out[split] = split_data
        start += n
    return out


def write_mmsa(data: Mapping, path: str | os.PathLike) -> pathlib.Path:
    """Write {split: {key: array}} as an MMSA-format pickle."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        pickle.dump({s: dict(v) for s, v in data.items()}, f, protocol=4)
    return path


def prepare(config, workdir: str | os.PathLike) -> dict[str, dict[str, np.ndarray]]:
    """The data of a run: a user's pickle, or the synthetic generator's pickle written to `workdir` and reloaded."""
    task = "classification" if config.loss.task == "ce" else "regression"
    if config.data.source == "pickle":
        return load_mmsa(config.data.path, task=task, text_input=config.data.text_input)
    d = config.data
    raw = generate(n_train=d.n_train, n_valid=d.n_valid, n_test=d.n_test, seq_len=d.seq_len, dim_text=d.dim_text,
                   dim_audio=d.dim_audio, dim_vision=d.dim_vision, shared_dim=d.shared_dim, unique_dim=d.unique_dim,
                   heterogeneity=d.heterogeneity, noise=d.noise, round_fraction=d.round_fraction, seed=d.seed,
                   unaligned=d.unaligned, seq_len_audio=d.seq_len_audio, seq_len_vision=d.seq_len_vision)
    tag = "_unaligned" if d.unaligned else ""
    path = write_mmsa(raw, pathlib.Path(workdir) / f"synthetic_h{d.heterogeneity:g}_s{d.seed}{tag}.pkl")
    data = load_mmsa(path, task=task, text_input=d.text_input)
    for s in SPLITS:  # the generating latents travel with the synthetic data (the oracles read them)
        data[s].update({k: v for k, v in raw[s].items() if k.startswith("latent_") or k == "clean_labels"})
    return data
