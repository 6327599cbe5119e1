"""HuggingFace checkpoint folders <-> our parameters, without torch.

A folder holds `config.json` and either `model.safetensors` or shards listed in
`model.safetensors.index.json`; tensors may be bf16, fp16 or fp32 (numpy reads bf16 through ml_dtypes).
`load_hf` checks every tensor's shape against the config before converting, and can place each parameter
straight onto a mesh (`core.lm.sharding`), so a large model never sits whole on one device.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Iterator
from typing import NamedTuple

import jax
import ml_dtypes
import numpy as np
from flax import nnx
from safetensors import safe_open
from safetensors.numpy import save_file

from core.config import BadInputError
from core.lm import model as model_lib
from core.lm.configs import LMConfig

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
_NP_DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


class WeightSpec(NamedTuple):
    hf_name: str
    path: tuple  # path into our params' pure dict
    hf_shape: tuple[int, ...]
    to_ours: Callable[[np.ndarray], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]


def weight_specs(config: LMConfig) -> list[WeightSpec]:
    """Every HF tensor of a Qwen2/Llama causal LM with its place and layout in our params."""
    c = config
    D, F, V, H, KVH, Dh = (c.hidden_size, c.intermediate_size, c.vocab_size, c.num_heads, c.num_kv_heads,
                           c.head_dim)
    ident = lambda w: w  # noqa: E731
    tr = lambda w: np.ascontiguousarray(w.T)  # noqa: E731

    def in_proj(n):  # HF (n*Dh, D) <-> ours (D, n, Dh)
        return (lambda w: np.ascontiguousarray(w.T).reshape(D, n, Dh),
                lambda w: np.ascontiguousarray(w.reshape(D, n * Dh).T))

    specs = [WeightSpec("model.embed_tokens.weight", ("embed_tokens",), (V, D), ident, ident)]
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        L = ("layers", i)
        q_in, q_out = in_proj(H)
        kv_in, kv_out = in_proj(KVH)
        specs += [
            WeightSpec(p + "input_layernorm.weight", L + ("input_layernorm", "weight"), (D,), ident, ident),
            WeightSpec(p + "post_attention_layernorm.weight", L + ("post_attention_layernorm", "weight"), (D,),
                       ident, ident),
            WeightSpec(p + "self_attn.q_proj.weight", L + ("self_attn", "q_proj"), (H * Dh, D), q_in, q_out),
            WeightSpec(p + "self_attn.k_proj.weight", L + ("self_attn", "k_proj"), (KVH * Dh, D), kv_in, kv_out),
            WeightSpec(p + "self_attn.v_proj.weight", L + ("self_attn", "v_proj"), (KVH * Dh, D), kv_in, kv_out),
            WeightSpec(p + "self_attn.o_proj.weight", L + ("self_attn", "o_proj"), (D, H * Dh),
                       lambda w: np.ascontiguousarray(w.T).reshape(H, Dh, D),
                       lambda w: np.ascontiguousarray(w.reshape(H * Dh, D).T)),
            WeightSpec(p + "mlp.gate_proj.weight", L + ("mlp", "gate_proj"), (F, D), tr, tr),
            WeightSpec(p + "mlp.up_proj.weight", L + ("mlp", "up_proj"), (F, D), tr, tr),
            WeightSpec(p + "mlp.down_proj.weight", L + ("mlp", "down_proj"), (D, F), tr, tr),
        ]
        if c.attention_bias:
            for n, heads in (("q", H), ("k", KVH), ("v", KVH)):
                specs.append(WeightSpec(p + f"self_attn.{n}_proj.bias", L + ("self_attn", f"{n}_bias"),
                                        (heads * Dh,), lambda w, h=heads: w.reshape(h, Dh),
                                        lambda w, h=heads: w.reshape(h * Dh)))
            if c.architecture in ("llama", "qwen3"):
                specs.append(WeightSpec(p + "self_attn.o_proj.bias", L + ("self_attn", "o_bias"), (D,), ident,
                                        ident))
        if c.qk_norm:
            specs += [WeightSpec(p + f"self_attn.{n}_norm.weight", L + ("self_attn", f"{n}_norm", "weight"), (Dh,),
                                 ident, ident) for n in ("q", "k")]
    specs.append(WeightSpec("model.norm.weight", ("norm", "weight"), (D,), ident, ident))
    if not c.tie_word_embeddings:
        specs.append(WeightSpec("lm_head.weight", ("lm_head",), (V, D), tr, tr))
    return specs


def _set_path(tree: dict, path: tuple, value) -> None:
    for k in path[:-1]:
        tree = tree.setdefault(k, {})
    tree[path[-1]] = value


def _get_path(tree, path: tuple):
    for k in path:
        tree = tree[k]
    return tree


def check_hf_folder(path: str | pathlib.Path, option: str) -> pathlib.Path:
    """The chat-model folder a user named with config option `option`: config.json and tokenizer.json present
    (the tensors are checked by `load_hf`), else one line naming the option and what is missing."""
    folder = pathlib.Path(path)
    missing = [n for n in ("config.json", "tokenizer.json") if not (folder / n).exists()]
    if missing:
        raise BadInputError(f"{option}={str(path)!r}: expected a HuggingFace folder with config.json, safetensors "
                            f"and tokenizer.json (missing {', '.join(missing)}; the weights are not shipped)")
    return folder


def _tensor_files(folder: pathlib.Path) -> dict[str, pathlib.Path]:
    """Map tensor name -> file, from the index (sharded) or the single file; checks shards exist."""
    index = folder / INDEX_NAME
    if index.exists():
        weight_map = json.loads(index.read_text()).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index}: expected a 'weight_map' object mapping tensor names to shard files")
        missing = sorted({f for f in weight_map.values() if not (folder / f).exists()})
        if missing:
            raise ValueError(f"missing shard file(s) {missing} listed in {index}: expected them in {folder}")
        return {name: folder / f for name, f in weight_map.items()}
    single = folder / SINGLE_NAME
    files = [single] if single.exists() else sorted(folder.glob("*.safetensors"))
    if not files:
        raise ValueError(f"checkpoint folder {str(folder)!r}: expected {SINGLE_NAME} or {INDEX_NAME}")
    names: dict[str, pathlib.Path] = {}
    for f in files:
        with safe_open(str(f), framework="np") as fh:
            for name in fh.keys():
                names[name] = f
    return names


def read_hf_tensors(folder: str | pathlib.Path,
                    config: LMConfig | None = None) -> Iterator[tuple[WeightSpec, np.ndarray]]:
    """Yield (spec, HF-layout numpy tensor) for every weight the config needs, checking names and shapes."""
    folder = pathlib.Path(folder)
    config = config or LMConfig.from_hf(folder)
    files = _tensor_files(folder)
    specs = weight_specs(config)
    missing = [s.hf_name for s in specs if s.hf_name not in files]
    if missing:
        raise ValueError(f"checkpoint {str(folder)!r} lacks {len(missing)} tensor(s) the config needs, e.g. "
                         f"{missing[:3]}: expected a {config.architecture} model with {config.num_layers} layers, "
                         f"attention_bias={config.attention_bias}, tie_word_embeddings={config.tie_word_embeddings}")
    by_file: dict[pathlib.Path, list[WeightSpec]] = {}
    for s in specs:
        by_file.setdefault(files[s.hf_name], []).append(s)
    for f, group in by_file.items():
        with safe_open(str(f), framework="np") as fh:
            for s in group:
                shape = tuple(fh.get_slice(s.hf_name).get_shape())
                if shape != s.hf_shape:
                    raise ValueError(f"tensor {s.hf_name} in {f.name} has shape {shape}: expected {s.hf_shape} "
                                     f"from config.json (hidden_size={config.hidden_size}, heads={config.num_heads}, "
                                     f"kv_heads={config.num_kv_heads}, head_dim={config.head_dim}, "
                                     f"intermediate_size={config.intermediate_size}, vocab_size={config.vocab_size})")
                yield s, fh.get_tensor(s.hf_name)


def load_hf(folder: str | pathlib.Path, *, config: LMConfig | None = None, param_dtype: str | None = None,
            dtype: str | None = None, mesh: jax.sharding.Mesh | None = None, rules=None
            ) -> tuple[LMConfig, nnx.GraphDef, nnx.State]:
    """Load a HF Qwen2/Llama folder: returns (config, graphdef, params).

    param_dtype / dtype override the stored / compute dtypes (default: float32 params and compute).
    With a `mesh`, each parameter goes straight to its sharding (see core.lm.sharding.param_shardings).
    """
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        raise ValueError(f"checkpoint folder {str(folder)!r}: expected an existing directory")
    if config is None:
        overrides = {}
        if param_dtype:
            overrides["param_dtype"] = param_dtype
        if dtype:
            overrides["dtype"] = dtype
        config = LMConfig.from_hf(folder, **overrides)
    graphdef, abstract_params = model_lib.abstract(config)
    shardings = None
    if mesh is not None:
        from core.lm.sharding import param_shardings

        shardings = nnx.to_pure_dict(param_shardings(abstract_params, mesh, rules))
    np_dtype = _NP_DTYPES[config.param_dtype]
    pure: dict = {}
    for spec, tensor in read_hf_tensors(folder, config):
        value = spec.to_ours(np.asarray(tensor).astype(np_dtype))
        if shardings is not None:
            value = jax.device_put(value, _get_path(shardings, spec.path))
        else:
            value = jax.numpy.asarray(value)
        _set_path(pure, spec.path, value)
    nnx.replace_by_pure_dict(abstract_params, pure)
    return config, graphdef, abstract_params


def to_hf_tensors(config: LMConfig, params: nnx.State | dict, dtype: str | None = None) -> dict[str, np.ndarray]:
    """Our params -> {HF name: numpy tensor in HF layout}."""
    pure = nnx.to_pure_dict(params) if isinstance(params, nnx.State) else params
    np_dtype = _NP_DTYPES[dtype or config.param_dtype]
    out = {}
    for s in weight_specs(config):
        w = np.asarray(jax.device_get(_get_path(pure, s.path)), dtype=np.float32)
        out[s.hf_name] = np.ascontiguousarray(s.to_hf(w)).astype(np_dtype)
    return out


def save_hf(folder: str | pathlib.Path, config: LMConfig, params: nnx.State | dict, *, dtype: str | None = None,
            max_shard_bytes: int | None = None) -> pathlib.Path:
    """Write `config.json` + safetensors (sharded with an index when above `max_shard_bytes`)."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    hf_config = config.to_hf()
    if dtype:
        hf_config["torch_dtype"] = dtype
    (folder / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
    tensors = to_hf_tensors(config, params, dtype)
    meta = {"format": "pt"}
    total = sum(t.nbytes for t in tensors.values())
    if max_shard_bytes is None or total <= max_shard_bytes:
        save_file(tensors, str(folder / SINGLE_NAME), metadata=meta)
        return folder
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name, t in tensors.items():
        if shards[-1] and size + t.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += t.nbytes
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(folder / fname), metadata=meta)
        weight_map.update({n: fname for n in shard})
    (folder / INDEX_NAME).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                                                indent=2) + "\n")
    return folder


def random_hf_tensors(config: LMConfig, seed: int, *, scale: float = 0.2) -> dict[str, np.ndarray]:
    """Deterministic random float32 weights in HF layout (numpy only): the parity fixtures' weights.

    Matrices ~ N(0, scale^2); norms ~ 1 + N(0, 0.1^2); biases ~ N(0, 0.1^2).
    """
    rng = np.random.default_rng(seed)
    out = {}
    for s in weight_specs(config):
        if s.hf_name.endswith("norm.weight"):
            w = 1.0 + 0.1 * rng.standard_normal(s.hf_shape)
        elif s.hf_name.endswith(".bias"):
            w = 0.1 * rng.standard_normal(s.hf_shape)
        else:
            w = scale * rng.standard_normal(s.hf_shape)
        out[s.hf_name] = w.astype(np.float32)
    return out


def params_from_hf_tensors(config: LMConfig, tensors: dict[str, np.ndarray]) -> tuple[nnx.GraphDef, nnx.State]:
    """(graphdef, params) from an in-memory {HF name: tensor} dict."""
    graphdef, params = model_lib.abstract(config)
    np_dtype = _NP_DTYPES[config.param_dtype]
    pure: dict = {}
    for s in weight_specs(config):
        _set_path(pure, s.path, jax.numpy.asarray(s.to_ours(np.asarray(tensors[s.hf_name]).astype(np_dtype))))
    nnx.replace_by_pure_dict(params, pure)
    return graphdef, params
