"""BERT text encoder for DecAlign's token-id text path (MMSA's `text_bert`), loaded from a HF BERT folder.

MMSA pickles carry, beside the precomputed 768-d BERT features (`text`), the tokenised text as `text_bert`
(N, 3, L): token ids, attention mask and segment ids. With `data.text_input="bert"` and
`model.text_encoder=FOLDER` (a HuggingFace BERT folder: config.json + model.safetensors, e.g. a local copy of
bert-base-uncased), DecAlign runs this encoder on the ids and fine-tunes it with the rest of the model, as the
paper's text branch does. Tensors are read through `core.lm.weights`' folder reader (single file or sharded
index); HF names with or without the `bert.` prefix and the old LayerNorm `gamma`/`beta` names are accepted.
The encoder is BertModel's last hidden state: word + position + segment embeddings, LayerNorm, then post-norm
layers (self-attention with the padding mask, erf-GELU feed-forward).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import safe_open
from safetensors.numpy import save_file

from core.config import BadInputError
from core.lm import weights as lm_weights

LAYER_KEYS = ("wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo", "ln1_s", "ln1_b", "w1", "b1", "w2", "b2", "ln2_s",
              "ln2_b")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    @classmethod
    def from_hf(cls, folder: str | pathlib.Path) -> BertConfig:
        path = pathlib.Path(folder) / "config.json"
        if not path.exists():
            raise BadInputError(f"{path}: no such file; expected a HuggingFace BERT folder (config.json + "
                                "model.safetensors) for model.text_encoder")
        raw = json.loads(path.read_text())
        if raw.get("model_type", "bert") != "bert":
            raise BadInputError(f"{path}: model_type={raw.get('model_type')!r}: expected 'bert'")
        if raw.get("hidden_act", "gelu") != "gelu":
            raise BadInputError(f"{path}: hidden_act={raw.get('hidden_act')!r}: expected 'gelu'")
        return cls(vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"], num_layers=raw["num_hidden_layers"],
                   num_heads=raw["num_attention_heads"], intermediate_size=raw["intermediate_size"],
                   max_position_embeddings=raw.get("max_position_embeddings", 512),
                   type_vocab_size=raw.get("type_vocab_size", 2), layer_norm_eps=raw.get("layer_norm_eps", 1e-12))

    def to_hf(self) -> dict:
        return {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": self.vocab_size,
                "hidden_size": self.hidden_size, "num_hidden_layers": self.num_layers,
                "num_attention_heads": self.num_heads, "intermediate_size": self.intermediate_size,
                "max_position_embeddings": self.max_position_embeddings, "type_vocab_size": self.type_vocab_size,
                "layer_norm_eps": self.layer_norm_eps, "hidden_act": "gelu"}


def _specs(c: BertConfig) -> list[tuple[str, tuple, bool]]:
    """(HF name without the `bert.` prefix, our key (name[, layer]), transposed) for every tensor."""
    out = [("embeddings.word_embeddings.weight", ("word",), False),
           ("embeddings.position_embeddings.weight", ("pos",), False),
           ("embeddings.token_type_embeddings.weight", ("type",), False),
           ("embeddings.LayerNorm.weight", ("ln_s",), False), ("embeddings.LayerNorm.bias", ("ln_b",), False)]
    for i in range(c.num_layers):
        p = f"encoder.layer.{i}."
        out += [(p + "attention.self.query.weight", ("wq", i), True),
                (p + "attention.self.query.bias", ("bq", i), False),
                (p + "attention.self.key.weight", ("wk", i), True), (p + "attention.self.key.bias", ("bk", i), False),
                (p + "attention.self.value.weight", ("wv", i), True),
                (p + "attention.self.value.bias", ("bv", i), False),
                (p + "attention.output.dense.weight", ("wo", i), True),
                (p + "attention.output.dense.bias", ("bo", i), False),
                (p + "attention.output.LayerNorm.weight", ("ln1_s", i), False),
                (p + "attention.output.LayerNorm.bias", ("ln1_b", i), False),
                (p + "intermediate.dense.weight", ("w1", i), True), (p + "intermediate.dense.bias", ("b1", i), False),
                (p + "output.dense.weight", ("w2", i), True), (p + "output.dense.bias", ("b2", i), False),
                (p + "output.LayerNorm.weight", ("ln2_s", i), False),
                (p + "output.LayerNorm.bias", ("ln2_b", i), False)]
    return out


def param_shapes(c: BertConfig) -> dict[str, tuple[int, ...]]:
    """Our layout: embeddings and the layers stacked on a leading axis (one scan over layers)."""
    H, F, n = c.hidden_size, c.intermediate_size, c.num_layers
    shapes = {"word": (c.vocab_size, H), "pos": (c.max_position_embeddings, H), "type": (c.type_vocab_size, H),
              "ln_s": (H,), "ln_b": (H,)}
    per = {"wq": (H, H), "wk": (H, H), "wv": (H, H), "wo": (H, H), "w1": (H, F), "w2": (F, H), "b1": (F,)}
    for k in LAYER_KEYS:
        shapes[k] = (n, *per.get(k, (H,)))
    return shapes


def read_bert(folder: str | pathlib.Path) -> tuple[BertConfig, dict[str, np.ndarray]]:
    """(config, params in our layout as float32 numpy) from a HF BERT folder; shapes checked against config.json."""
    folder = pathlib.Path(folder)
    c = BertConfig.from_hf(folder)
    try:
        files = lm_weights._tensor_files(folder)
    except ValueError as err:
        raise BadInputError(str(err)) from None
    shapes = param_shapes(c)
    params = {k: np.zeros(s, np.float32) for k, s in shapes.items()}

    def find(name):
        for cand in (name, "bert." + name, name.replace("LayerNorm.weight", "LayerNorm.gamma"),
                     "bert." + name.replace("LayerNorm.weight", "LayerNorm.gamma"),
                     name.replace("LayerNorm.bias", "LayerNorm.beta"),
                     "bert." + name.replace("LayerNorm.bias", "LayerNorm.beta")):
            if cand in files:
                return cand
        raise BadInputError(f"BERT folder {str(folder)!r} lacks tensor {name!r} (nor 'bert.{name}'): expected a "
                            f"BertModel checkpoint with {c.num_layers} layers")

    for name, key, transpose in _specs(c):
        hf = find(name)
        with safe_open(str(files[hf]), framework="np") as fh:
            t = np.asarray(fh.get_tensor(hf), np.float32)
        t = t.T if transpose else t
        target = params[key[0]] if len(key) == 1 else params[key[0]][key[1]]
        if t.shape != target.shape:
            raise BadInputError(f"tensor {hf} has shape {t.shape if not transpose else t.T.shape}: expected "
                                f"{target.shape if not transpose else target.T.shape} from config.json")
        if len(key) == 1:
            params[key[0]] = t
        else:
            params[key[0]][key[1]] = t
    return c, params


def save_bert(folder: str | pathlib.Path, c: BertConfig, params: dict) -> pathlib.Path:
    """Write a HF BERT folder (config.json + model.safetensors, BertModel names) from our-layout params."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, key, transpose in _specs(c):
        t = np.asarray(params[key[0]] if len(key) == 1 else params[key[0]][key[1]], np.float32)
        tensors[name] = np.ascontiguousarray(t.T if transpose else t)
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(c.to_hf(), indent=1))
    return folder


def random_bert(c: BertConfig, seed: int = 0, scale: float = 0.2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)  # host-side, for test folders
    out = {}
    for k, s in param_shapes(c).items():
        if k.endswith("_s"):
            out[k] = (1.0 + 0.1 * rng.normal(size=s)).astype(np.float32)
        else:
            out[k] = (scale * rng.normal(size=s)).astype(np.float32)
    return out


def _ln(x, s, b, eps):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.var(x, -1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * s + b


def bert_forward(p: dict, ids: jax.Array, mask: jax.Array, segments: jax.Array, c: BertConfig) -> jax.Array:
    """Last hidden state (B, L, H) of BertModel for token ids, attention mask (1 = token) and segment ids (B, L)."""
    b, length = ids.shape
    H, nh = c.hidden_size, c.num_heads
    x = p["word"][ids] + p["pos"][jnp.arange(length)][None] + p["type"][segments]
    x = _ln(x, p["ln_s"], p["ln_b"], c.layer_norm_eps)
    bias = jnp.where(mask[:, None, None, :] > 0, 0.0, -1e9)

    def layer(x, lp):
        split = lambda t: t.reshape(b, length, nh, H // nh)
        q, k, v = split(x @ lp["wq"] + lp["bq"]), split(x @ lp["wk"] + lp["bk"]), split(x @ lp["wv"] + lp["bv"])
        att = jax.nn.softmax(jnp.einsum("bqhe,bkhe->bhqk", q, k) / jnp.sqrt(H // nh) + bias, axis=-1)
        o = jnp.einsum("bhqk,bkhe->bqhe", att, v).reshape(b, length, H) @ lp["wo"] + lp["bo"]
        x = _ln(x + o, lp["ln1_s"], lp["ln1_b"], c.layer_norm_eps)
        f = jax.nn.gelu(x @ lp["w1"] + lp["b1"], approximate=False) @ lp["w2"] + lp["b2"]
        return _ln(x + f, lp["ln2_s"], lp["ln2_b"], c.layer_norm_eps), None

    x, _ = jax.lax.scan(layer, x, {k: p[k] for k in LAYER_KEYS})
    return x


class BertEncoder(nnx.Module):
    """BERT as an nnx module with randomly initialised parameters of the folder's shapes; `load_text_encoder`
    replaces them with the folder's weights after initialisation (kept out of the jitted init)."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.config = config
        key = rngs.params()
        for i, (k, s) in enumerate(param_shapes(config).items()):
            v = jnp.ones(s) if k.endswith("_s") else 0.02 * jax.random.normal(jax.random.fold_in(key, i), s)
            setattr(self, f"p_{k}", nnx.Param(v))

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """tokens (B, L, 3): ids, mask, segments (MMSA text_bert transposed) -> (B, L, H)."""
        tokens = tokens.astype(jnp.int32)
        p = {k: getattr(self, f"p_{k}")[...] for k in param_shapes(self.config)}
        return bert_forward(p, tokens[..., 0], tokens[..., 1], tokens[..., 2], self.config)


def load_text_encoder(params: nnx.State, folder: str | pathlib.Path, runs: int | None = None) -> nnx.State:
    """Put a HF BERT folder's weights into DecAlign params (`text_encoder` subtree); `runs` broadcasts them over a
    leading axis of vmapped runs."""
    _, weights = read_bert(folder)
    pure = nnx.to_pure_dict(params)
    enc = pure["text_encoder"]
    for k, v in weights.items():
        v = jnp.asarray(v)
        enc[f"p_{k}"] = jnp.broadcast_to(v, (runs, *v.shape)) if runs is not None else v
    nnx.replace_by_pure_dict(params, pure)
    return params
