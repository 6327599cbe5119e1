"""Functional LoRA adapters for the core.lm decoder, with merge/unmerge and the HF PEFT adapter layout.

A LoRA adapter on a linear map y = x @ W adds `scale * dropout(x) @ A @ B` (Hu et al. 2021, eq. 3), with A
(in, r) initialised as PEFT does (kaiming-uniform, i.e. U(-1/sqrt(in), 1/sqrt(in))), B (r, out) at zero, and
scale = alpha / r (or alpha / sqrt(r) with rsLoRA). Adapters are a pytree separate from the base params, so
`jax.grad` with respect to them alone leaves the base weights fixed:

    lora_config = LoraConfig(rank=8, alpha=16, dropout=0.05, targets=("q_proj", "v_proj"))
    adapters = init_lora(lm_config, lora_config, jax.random.key(0))
    out = apply(graphdef, params, tokens, lora=LoraInputs(adapters, lora_config, key=dropout_key))
    merged = merge(params, adapters, lora_config)          # the same logits, no adapter at inference

Adapter weights keep our 3-D layouts: A has the base weight's input dims then r, B has r then its output dims
(q_proj: A (D, r), B (r, H, Dh); o_proj: A (H, Dh, r), B (r, D); down_proj: A (F, r), B (r, D)), so that
W + scale * tensordot(A, B, 1) is the merged weight. `save_peft` / `load_peft` convert to PEFT's
`lora_A.weight` (r, in) and `lora_B.weight` (out, r).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import pathlib
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from flax import nnx, struct
from safetensors import safe_open
from safetensors.numpy import save_file

from core.lm.configs import LMConfig

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_MODULE = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
           "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
_NP_DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraConfig:
    """Which projections get adapters and how they are scaled. Defaults are PEFT's (r=8, alpha=8, no
    dropout, q_proj and v_proj for Llama/Qwen2). `layers`: block indices (PEFT's `layers_to_transform`),
    None = every block. `use_rslora`: scale alpha / sqrt(rank) instead of alpha / rank."""

    rank: int = 8
    alpha: float = 8.0
    dropout: float = 0.0
    targets: tuple[str, ...] = ("q_proj", "v_proj")
    layers: tuple[int, ...] | None = None
    use_rslora: bool = False

    def __post_init__(self):
        targets = (self.targets,) if isinstance(self.targets, str) else tuple(self.targets)
        bad = [t for t in targets if t not in TARGETS]
        if bad:
            raise ValueError(f"LoRA target {bad[0]!r} matches no layer: expected names from {TARGETS}")
        if not targets:
            raise ValueError(f"LoRA targets=(): expected at least one of {TARGETS}")
        # canonical order, no duplicates: equal configs compare (and hash, for jit) equal
        object.__setattr__(self, "targets", tuple(t for t in TARGETS if t in targets))
        if not (isinstance(self.rank, int) and self.rank > 0):
            raise ValueError(f"LoRA rank={self.rank!r}: expected a positive int")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoRA dropout={self.dropout!r}: expected a rate in [0, 1)")
        if self.layers is not None:
            layers = (self.layers,) if isinstance(self.layers, int) else tuple(self.layers)
            if not layers or any(not isinstance(i, int) or i < 0 for i in layers) or len(set(layers)) != len(layers):
                raise ValueError(f"LoRA layers={self.layers!r}: expected distinct non-negative block indices")
            object.__setattr__(self, "layers", tuple(sorted(layers)))

    @property
    def scale(self) -> float:
        """The LoRA branch's multiplier: alpha / rank, or alpha / sqrt(rank) with rsLoRA."""
        return self.alpha / (math.sqrt(self.rank) if self.use_rslora else self.rank)

    def layer_indices(self, lm_config: LMConfig) -> tuple[int, ...]:
        """The adapted blocks of `lm_config` (checks that every index exists)."""
        if self.layers is None:
            return tuple(range(lm_config.num_layers))
        bad = [i for i in self.layers if i >= lm_config.num_layers]
        if bad:
            raise ValueError(f"LoRA layer {bad[0]} matches no layer: expected indices below num_layers="
                             f"{lm_config.num_layers}")
        return self.layers


class LoraWeights(NamedTuple):
    """One projection's adapter: a (*in_dims, r) and b (r, *out_dims) in the base weight's layout."""

    a: jax.Array
    b: jax.Array


def weight_shape(lm_config: LMConfig, target: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(input dims, output dims) of a target's base weight in our layout (q_proj: ((D,), (H, Dh)))."""
    c = lm_config
    D, F, H, KVH, Dh = c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, c.head_dim
    return {"q_proj": ((D,), (H, Dh)), "k_proj": ((D,), (KVH, Dh)), "v_proj": ((D,), (KVH, Dh)),
            "o_proj": ((H, Dh), (D,)), "gate_proj": ((D,), (F,)), "up_proj": ((D,), (F,)),
            "down_proj": ((F,), (D,))}[target]


def adapter_shapes(lm_config: LMConfig, lora_config: LoraConfig) -> dict[int, dict[str, tuple[tuple, tuple]]]:
    """{layer: {target: (A shape, B shape)}} of every adapter the config asks for."""
    r = lora_config.rank
    out = {}
    for i in lora_config.layer_indices(lm_config):
        out[i] = {}
        for t in lora_config.targets:
            ins, outs = weight_shape(lm_config, t)
            out[i][t] = (ins + (r,), (r,) + outs)
    return out


Adapters = dict  # {layer index: {target name: LoraWeights}}


def init_lora(lm_config: LMConfig, lora_config: LoraConfig, key: jax.Array, *, dtype=jnp.float32) -> Adapters:
    """Fresh adapters {layer: {target: LoraWeights}}: A ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PEFT's
    kaiming_uniform(a=sqrt(5)) on the (r, in) weight), B = 0, so the adapted model starts equal to the base.
    All A's come from one uniform draw of `key`, in (layer, target) order (one compile per config)."""
    lora_config.layer_indices(lm_config)  # validate outside jit
    adapters = _init_lora(lm_config, lora_config, key, jnp.dtype(dtype))
    return {i: {t: ws[t] for t in lora_config.targets} for i, ws in adapters.items()}  # jit sorts dict keys


@functools.partial(jax.jit, static_argnums=(0, 1, 3))
def _init_lora(lm_config: LMConfig, lora_config: LoraConfig, key: jax.Array, dtype) -> Adapters:
    shapes = adapter_shapes(lm_config, lora_config)
    sizes = [math.prod(a) for ws in shapes.values() for a, _ in ws.values()]
    u = jax.random.uniform(key, (sum(sizes),), dtype, minval=-1.0, maxval=1.0)
    adapters, start = {}, 0
    for i, targets in shapes.items():
        adapters[i] = {}
        for t, (a_shape, b_shape) in targets.items():
            n = math.prod(a_shape)
            bound = 1.0 / math.sqrt(math.prod(a_shape[:-1]))
            adapters[i][t] = LoraWeights(a=u[start:start + n].reshape(a_shape) * bound, b=jnp.zeros(b_shape, dtype))
            start += n
    return adapters


def _delta(w: LoraWeights, x: jax.Array, dtype) -> jax.Array:
    """x (..., *in_dims) @ A @ B -> (..., *out_dims), in `dtype`."""
    a, b = w.a.astype(dtype), w.b.astype(dtype)
    return jnp.tensordot(jnp.tensordot(x.astype(dtype), a, axes=a.ndim - 1), b, axes=1)


@struct.dataclass
class LayerLora:
    """One block's adapters, as the model's projections call them: `lora(name, x, y)` returns the base
    output y plus the LoRA branch of input x for a targeted `name`, else y unchanged."""

    weights: dict
    key: jax.Array | None
    scale: float = struct.field(pytree_node=False, default=1.0)
    rate: float = struct.field(pytree_node=False, default=0.0)
    layer: int = struct.field(pytree_node=False, default=0)

    def __call__(self, name: str, x: jax.Array, y: jax.Array) -> jax.Array:
        w = self.weights.get(name)
        if w is None:
            return y
        n_in, n_out = w.a.ndim - 1, w.b.ndim - 1
        ins, outs = x.shape[x.ndim - n_in:], y.shape[y.ndim - n_out:]
        if w.a.shape[:-1] != ins or w.b.shape[1:] != outs or w.a.shape[-1] != w.b.shape[0]:
            raise ValueError(f"LoRA adapter layers.{self.layer}.{name} A {w.a.shape}, B {w.b.shape}: expected A "
                             f"{ins + (w.b.shape[0],)} and B {(w.a.shape[-1],) + outs} for this model")
        if self.key is not None and self.rate > 0.0:  # PEFT: dropout on the LoRA branch's input only
            x = nnx.Dropout(self.rate)(x, rngs=jax.random.fold_in(self.key, TARGETS.index(name)))
        return y + (self.scale * _delta(w, x, y.dtype)).astype(y.dtype)


@struct.dataclass
class LoraInputs:
    """What `apply(..., lora=...)` takes: the adapters (traced, differentiable), the config (static) and an
    optional dropout key. Without a key, or with `deterministic=True`, there is no dropout. The dropout mask of
    block l's projection t is drawn with `fold_in(fold_in(key, l), TARGETS.index(t))`."""

    adapters: dict
    config: LoraConfig = struct.field(pytree_node=False)
    key: jax.Array | None = None
    deterministic: bool = struct.field(pytree_node=False, default=False)

    def layer(self, i: int) -> LayerLora | None:
        """Block i's adapters, or None when it has none."""
        weights = self.adapters.get(i)
        if not weights:
            return None
        key = None if self.key is None or self.deterministic else jax.random.fold_in(self.key, i)
        return LayerLora(weights=weights, key=key, scale=self.config.scale, rate=self.config.dropout, layer=i)


# --- merge / unmerge ------------------------------------------------------------------------------


def _add_deltas(params, adapters: Adapters, lora_config: LoraConfig, sign: float):
    deltas = {("layers", i, _MODULE[t], t): w for i, ws in adapters.items() for t, w in ws.items()}
    seen = set()

    def update(path, leaf):
        keys = tuple(p.key for p in path if isinstance(p, jax.tree_util.DictKey))
        w = deltas.get(keys)
        if w is None:
            return leaf
        seen.add(keys)
        d = lora_config.scale * jnp.tensordot(w.a.astype(jnp.float32), w.b.astype(jnp.float32), axes=1)
        if d.shape != leaf.shape:
            raise ValueError(f"LoRA adapter {'.'.join(map(str, keys))} gives a delta of shape {d.shape}: expected "
                             f"the base weight's {leaf.shape}")
        return (leaf.astype(jnp.float32) + sign * d).astype(leaf.dtype)

    out = jax.tree_util.tree_map_with_path(update, params)
    missing = sorted(set(deltas) - seen)
    if missing:
        raise ValueError(f"LoRA adapter {'.'.join(map(str, missing[0]))}: expected that weight in the base params")
    return out


def merge(params: nnx.State, adapters: Adapters, lora_config: LoraConfig) -> nnx.State:
    """Base params with W + scale * A @ B in every adapted weight (computed in float32, stored in the
    weight's dtype): the same forward as the adapter without dropout. Pure and jittable."""
    return _add_deltas(params, adapters, lora_config, 1.0)


def unmerge(merged: nnx.State, adapters: Adapters, lora_config: LoraConfig) -> nnx.State:
    """Inverse of `merge`: W - scale * A @ B in every adapted weight (exact up to float rounding)."""
    return _add_deltas(merged, adapters, lora_config, -1.0)


# --- PEFT adapter folders -------------------------------------------------------------------------


def peft_name(layer: int, target: str, which: str) -> str:
    """PEFT's safetensors key of one adapter matrix (`which` is "lora_A" or "lora_B")."""
    return f"base_model.model.model.layers.{layer}.{_MODULE[target]}.{target}.{which}.weight"


def save_peft(folder: str | pathlib.Path, adapters: Adapters, lora_config: LoraConfig, lm_config: LMConfig, *,
              base_model_name_or_path: str | None = None, dtype: str = "float32") -> pathlib.Path:
    """Write `adapter_config.json` + `adapter_model.safetensors` as PEFT's `save_pretrained` does, so
    `peft.PeftModel.from_pretrained(hf_model, folder)` loads them. lora_A (r, in), lora_B (out, r)."""
    _check_adapters(adapters, lora_config, lm_config, "adapters")
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    c = lora_config
    hf = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model_name_or_path,
          "r": c.rank, "lora_alpha": c.alpha, "lora_dropout": c.dropout, "target_modules": list(c.targets),
          "layers_to_transform": None if c.layers is None else list(c.layers), "layers_pattern": None,
          "bias": "none", "fan_in_fan_out": False, "use_rslora": c.use_rslora, "use_dora": False,
          "lora_bias": False, "init_lora_weights": True, "modules_to_save": None, "rank_pattern": {},
          "alpha_pattern": {}, "inference_mode": True, "revision": None}
    (folder / CONFIG_NAME).write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")
    np_dtype = _NP_DTYPES[dtype]
    tensors = {}
    for i, ws in adapters.items():
        for t, w in ws.items():
            a = np.asarray(jax.device_get(w.a), np.float32)
            b = np.asarray(jax.device_get(w.b), np.float32)
            tensors[peft_name(i, t, "lora_A")] = np.ascontiguousarray(a.reshape(-1, c.rank).T).astype(np_dtype)
            tensors[peft_name(i, t, "lora_B")] = np.ascontiguousarray(b.reshape(c.rank, -1).T).astype(np_dtype)
    save_file(tensors, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})
    return folder


_UNSUPPORTED = {"use_dora": False, "lora_bias": False, "fan_in_fan_out": False, "bias": "none",
                "modules_to_save": None, "layer_replication": None, "rank_pattern": {}, "alpha_pattern": {},
                "exclude_modules": None, "target_parameters": None, "trainable_token_indices": None,
                "use_qalora": False, "alora_invocation_tokens": None}


def _read_config(folder: pathlib.Path) -> LoraConfig:
    path = folder / CONFIG_NAME
    if not path.exists():
        raise ValueError(f"PEFT adapter folder {str(folder)!r}: expected {CONFIG_NAME} in it")
    hf = json.loads(path.read_text())
    if hf.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"{path}: peft_type={hf.get('peft_type')!r}: expected 'LORA'")
    for field, default in _UNSUPPORTED.items():
        if hf.get(field, default) not in (default, None, {}, [], False):
            raise ValueError(f"{path}: {field}={hf[field]!r} is not supported: expected {default!r}")
    targets = hf.get("target_modules")
    if not isinstance(targets, list):
        raise ValueError(f"{path}: target_modules={targets!r}: expected a list of module names from {TARGETS}")
    layers = hf.get("layers_to_transform")
    return LoraConfig(rank=int(hf["r"]), alpha=float(hf["lora_alpha"]), dropout=float(hf.get("lora_dropout", 0.0)),
                      targets=tuple(targets), layers=None if layers is None else layers,
                      use_rslora=bool(hf.get("use_rslora", False)))


def load_peft(folder: str | pathlib.Path, lm_config: LMConfig, *, dtype=jnp.float32) -> tuple[Adapters, LoraConfig]:
    """Read a PEFT LoRA adapter folder for a base model of `lm_config`: returns (adapters, lora_config).

    Every tensor's name and shape is checked against the base config first: an adapter saved for another
    base (other layer count or widths) is a ValueError naming the tensor and both shapes."""
    folder = pathlib.Path(folder)
    lora_config = _read_config(folder)
    path = folder / WEIGHTS_NAME
    if not path.exists():
        raise ValueError(f"PEFT adapter folder {str(folder)!r}: expected {WEIGHTS_NAME} in it")
    expected = {}
    for i, ws in adapter_shapes(lm_config, lora_config).items():
        for t, (a_shape, b_shape) in ws.items():
            ins, outs = math.prod(a_shape[:-1]), math.prod(b_shape[1:])
            expected[peft_name(i, t, "lora_A")] = (i, t, (lora_config.rank, ins), a_shape)
            expected[peft_name(i, t, "lora_B")] = (i, t, (outs, lora_config.rank), b_shape)
    adapters: Adapters = {}
    with safe_open(str(path), framework="np") as fh:
        names = set(fh.keys())
        extra = sorted(names - set(expected))
        if extra:
            raise ValueError(f"{path.name}: tensor {extra[0]} is not an adapter of this base (expected layers "
                             f"{lora_config.layer_indices(lm_config)} of {lm_config.num_layers} and targets "
                             f"{lora_config.targets})")
        for name, (i, t, hf_shape, our_shape) in expected.items():
            if name not in names:
                raise ValueError(f"{path.name}: tensor {name} is missing: expected shape {hf_shape} for a base with "
                                 f"{lm_config.num_layers} layers")
            shape = tuple(fh.get_slice(name).get_shape())
            if shape != hf_shape:
                raise ValueError(f"{path.name}: tensor {name} has shape {shape}: expected {hf_shape} for this base "
                                 f"(hidden_size={lm_config.hidden_size}, heads={lm_config.num_heads}, "
                                 f"kv_heads={lm_config.num_kv_heads}, head_dim={lm_config.head_dim}, "
                                 f"intermediate_size={lm_config.intermediate_size}, r={lora_config.rank})")
            w = np.asarray(fh.get_tensor(name)).astype(np.float32).T.reshape(our_shape)
            entry = adapters.setdefault(i, {}).setdefault(t, {})
            entry["a" if ".lora_A." in name else "b"] = jnp.asarray(w, dtype)
    adapters = {i: {t: LoraWeights(**ws[t]) for t in lora_config.targets} for i, ws in sorted(adapters.items())}
    return adapters, lora_config


def _check_adapters(adapters: Adapters, lora_config: LoraConfig, lm_config: LMConfig, what: str) -> None:
    """Adapters hold exactly the (layer, target) pairs of the config, with this base's shapes."""
    want = adapter_shapes(lm_config, lora_config)
    if sorted(adapters) != sorted(want):
        raise ValueError(f"{what} layers {sorted(adapters)}: expected {sorted(want)} from the LoRA config")
    for i, ws in want.items():
        if sorted(adapters[i]) != sorted(ws):
            raise ValueError(f"{what} layer {i} targets {sorted(adapters[i])}: expected {sorted(ws)}")
        for t, (a_shape, b_shape) in ws.items():
            w = adapters[i][t]
            if tuple(w.a.shape) != a_shape or tuple(w.b.shape) != b_shape:
                raise ValueError(f"{what} layers.{i}.{t} A {tuple(w.a.shape)}, B {tuple(w.b.shape)}: expected A "
                                 f"{a_shape}, B {b_shape}")
