"""Configs for the shared decoder (`LMConfig`) and the tiny-LM trainer (`TinyLMConfig`).

`LMConfig` covers the Qwen2 and Llama families and round-trips with a HuggingFace `config.json`
(`LMConfig.from_hf` / `LMConfig.to_hf`).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Mapping
from typing import Any

from core.config import check

SUPPORTED_ARCHITECTURES = {
    "Qwen2ForCausalLM": "qwen2",
    "LlamaForCausalLM": "llama",
    "Qwen3ForCausalLM": "qwen3",
}
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")
DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RopeScaling:
    """Rotary scaling. `rope_type`: "default" (none), "linear" (positions / factor) or "llama3"."""

    rope_type: str = "default"  # "default" (no scaling), "linear" (positions / factor) or "llama3"
    factor: float = 1.0  # context extension factor
    low_freq_factor: float = 1.0  # llama3: wavelengths above original / low_freq_factor are scaled by 1 / factor
    high_freq_factor: float = 4.0  # llama3: wavelengths below original / high_freq_factor are kept
    original_max_position_embeddings: int = 8192  # llama3: the context length the model was trained at

    def __post_init__(self):
        check(self.rope_type in SUPPORTED_ROPE_TYPES, "rope_scaling.rope_type", self.rope_type,
               f"one of {SUPPORTED_ROPE_TYPES}")
        check(self.factor > 0, "rope_scaling.factor", self.factor, "> 0")
        if self.rope_type == "llama3":
            check(self.high_freq_factor > self.low_freq_factor, "rope_scaling.high_freq_factor",
                   self.high_freq_factor, f"> low_freq_factor={self.low_freq_factor}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LMConfig:
    """A Qwen2/Llama-family decoder. Defaults are a tiny model; `from_hf` reads a real one."""

    architecture: str = "qwen2"  # "qwen2" | "llama" | "qwen3" (Qwen3: per-head q/k RMSNorm)
    vocab_size: int = 64  # rows of the embedding table (token ids 0 .. vocab_size - 1)
    hidden_size: int = 32  # residual stream width
    intermediate_size: int = 64  # SwiGLU MLP width
    num_layers: int = 2  # decoder blocks
    num_heads: int = 4  # query heads
    num_kv_heads: int = 2  # key/value heads (grouped-query attention when fewer than num_heads)
    head_dim: int = 8  # width of one attention head
    rms_norm_eps: float = 1e-6  # RMSNorm epsilon
    rope_theta: float = 10000.0  # rotary embedding base
    rope_scaling: RopeScaling = RopeScaling()
    attention_bias: bool = True  # Qwen2: q/k/v bias; Llama/Qwen3: q/k/v/o bias
    tie_word_embeddings: bool = False  # the output projection reuses the embedding table
    max_position_embeddings: int = 4096  # longest sequence (positions) the model is built for
    dtype: str = "float32"  # compute dtype
    param_dtype: str = "float32"  # dtype the parameters are stored in
    bos_token_id: int | None = None  # beginning-of-sequence token (None: none)
    eos_token_id: int | tuple[int, ...] | None = None  # token(s) that end generation (None: none)
    def __post_init__(self):
        check(self.architecture in SUPPORTED_ARCHITECTURES.values(), "architecture", self.architecture,
               f"one of {tuple(SUPPORTED_ARCHITECTURES.values())}")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim", "max_position_embeddings"):
            check(getattr(self, name) > 0, name, getattr(self, name), "> 0")
        check(self.num_heads % self.num_kv_heads == 0, "num_kv_heads", self.num_kv_heads,
               f"a divisor of num_heads={self.num_heads}")
        check(self.head_dim % 2 == 0, "head_dim", self.head_dim, "even (rotary embeddings)")
        check(self.rms_norm_eps > 0, "rms_norm_eps", self.rms_norm_eps, "> 0")
        check(self.dtype in DTYPES, "dtype", self.dtype, f"one of {DTYPES}")
        check(self.param_dtype in DTYPES, "param_dtype", self.param_dtype, f"one of {DTYPES}")

    @property
    def qk_norm(self) -> bool:
        return self.architecture == "qwen3"

    @property
    def num_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    # --- HuggingFace config.json ---------------------------------------------------------------
    @classmethod
    def from_hf(cls, hf: Mapping[str, Any] | str | pathlib.Path, **overrides) -> LMConfig:
        """Build from a HuggingFace `config.json` (a dict, the file, or its folder)."""
        if not isinstance(hf, Mapping):
            path = pathlib.Path(hf)
            if path.is_dir():
                path = path / "config.json"
            if not path.exists():
                raise ValueError(f"config path {str(path)!r}: expected an existing config.json")
            hf = json.loads(path.read_text())
        archs = hf.get("architectures") or []
        model_type = hf.get("model_type")
        arch = None
        for a in archs:
            if a in SUPPORTED_ARCHITECTURES:
                arch = SUPPORTED_ARCHITECTURES[a]
        if arch is None and not archs and model_type in SUPPORTED_ARCHITECTURES.values():
            arch = model_type
        if arch is None:
            raise ValueError(
                f"architectures={archs!r} (model_type={model_type!r}): expected one of "
                f"{tuple(SUPPORTED_ARCHITECTURES)}")
        if hf.get("use_sliding_window", False):
            raise ValueError("use_sliding_window=True: expected False (sliding-window attention is not supported)")
        if hf.get("mlp_bias", False):
            raise ValueError("mlp_bias=True: expected False (MLP biases are not supported)")
        if hf.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act={hf.get('hidden_act')!r}: expected 'silu'")
        num_heads = int(hf["num_attention_heads"])
        hidden = int(hf["hidden_size"])
        head_dim = hf.get("head_dim") or hidden // num_heads
        # transformers >= 5 keeps rope settings in `rope_parameters`; older versions in rope_theta/rope_scaling.
        rope_params = dict(hf.get("rope_parameters") or {})
        rope_scaling = dict(hf.get("rope_scaling") or {})
        theta = rope_params.get("rope_theta", hf.get("rope_theta", 10000.0))
        scaling_src = rope_scaling or rope_params
        rope_type = scaling_src.get("rope_type", scaling_src.get("type", "default")) or "default"
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise ValueError(f"rope_scaling.rope_type={rope_type!r}: expected one of {SUPPORTED_ROPE_TYPES}")
        scaling = RopeScaling(
            rope_type=rope_type,
            factor=float(scaling_src.get("factor", 1.0)),
            low_freq_factor=float(scaling_src.get("low_freq_factor", 1.0)),
            high_freq_factor=float(scaling_src.get("high_freq_factor", 4.0)),
            original_max_position_embeddings=int(scaling_src.get("original_max_position_embeddings", 8192)),
        )
        bias = hf.get("attention_bias", arch == "qwen2")
        if arch == "qwen2":
            bias = True  # Qwen2 always has q/k/v bias
        eos = hf.get("eos_token_id")
        if isinstance(eos, list):
            eos = tuple(eos)
        kw = dict(
            architecture=arch,
            vocab_size=int(hf["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(hf["intermediate_size"]),
            num_layers=int(hf["num_hidden_layers"]),
            num_heads=num_heads,
            num_kv_heads=int(hf.get("num_key_value_heads") or num_heads),
            head_dim=int(head_dim),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            rope_scaling=scaling,
            attention_bias=bool(bias),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            max_position_embeddings=int(hf.get("max_position_embeddings", 4096)),
            bos_token_id=hf.get("bos_token_id"),
            eos_token_id=eos,
        )
        kw.update(overrides)
        return cls(**kw)

    def to_hf(self) -> dict[str, Any]:
        """A HuggingFace `config.json` dict that `transformers` loads as the same model."""
        arch_name = {v: k for k, v in SUPPORTED_ARCHITECTURES.items()}[self.architecture]
        d: dict[str, Any] = {
            "architectures": [arch_name],
            "model_type": self.architecture,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "torch_dtype": self.param_dtype,
            "use_cache": True,
            "attention_dropout": 0.0,
        }
        rs = self.rope_scaling
        rope_parameters: dict[str, Any] = {"rope_type": rs.rope_type, "rope_theta": self.rope_theta}
        if rs.rope_type == "linear":
            d["rope_scaling"] = {"rope_type": "linear", "factor": rs.factor}
        elif rs.rope_type == "llama3":
            d["rope_scaling"] = {
                "rope_type": "llama3", "factor": rs.factor, "low_freq_factor": rs.low_freq_factor,
                "high_freq_factor": rs.high_freq_factor,
                "original_max_position_embeddings": rs.original_max_position_embeddings,
            }
        else:
            d["rope_scaling"] = None
        if d["rope_scaling"]:
            rope_parameters.update(d["rope_scaling"])
        d["rope_parameters"] = rope_parameters
        if self.architecture in ("llama", "qwen3"):
            d["attention_bias"] = self.attention_bias
        if self.architecture == "llama":
            d["mlp_bias"] = False
        else:
            d["use_sliding_window"] = False
            d["sliding_window"] = None
            d["max_window_layers"] = self.num_layers
        if self.bos_token_id is not None:
            d["bos_token_id"] = self.bos_token_id
        if self.eos_token_id is not None:
            d["eos_token_id"] = list(self.eos_token_id) if isinstance(self.eos_token_id, tuple) else self.eos_token_id
        return d


@dataclasses.dataclass(frozen=True, kw_only=True)
class TinyLMConfig:
    """Train a small decoder from scratch on a synthetic task (`core.lm.data.TASKS`).

    Presets: `tiny` (seconds, smoke tests), `demo` (~1 min on 2 CPU cores, reversal to >95% exact match).
    Command: `iclr26 run tiny_lm --preset demo --workdir /tmp/tiny_lm`.
    """

    model: LMConfig = LMConfig(architecture="qwen2", vocab_size=16, hidden_size=64, intermediate_size=128,
                               num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                               tie_word_embeddings=True)
    task: str = "reverse"  # "reverse" | "kv_recall"
    num_symbols: int = 8  # alphabet size of the synthetic task
    min_len: int = 3  # shortest example sequence (symbols)
    max_len: int = 6  # longest example sequence (symbols)
    pack: bool = True  # pack examples into rows of `seq_len` (segment-aware attention)
    seq_len: int = 64  # row length (tokens) of a training batch
    num_train: int = 20000  # generated training examples
    num_eval: int = 256  # held-out evaluation examples
    batch_size: int = 32
    steps: int = 600
    lr: float = 3e-3
    warmup: int = 100
    weight_decay: float = 0.01
    seed: int = 0
    log_every: int = 100
    eval_every: int = 200

    def __post_init__(self):
        check(self.task in ("reverse", "kv_recall"), "task", self.task, "'reverse' or 'kv_recall'")
        check(2 <= self.num_symbols, "num_symbols", self.num_symbols, ">= 2")
        check(1 <= self.min_len <= self.max_len, "min_len", self.min_len, f"in [1, max_len={self.max_len}]")
        for name in ("seq_len", "num_train", "num_eval", "batch_size", "steps", "log_every"):
            check(getattr(self, name) > 0, name, getattr(self, name), "> 0")
        check(self.lr > 0, "lr", self.lr, "> 0")


def tiny_presets() -> dict[str, TinyLMConfig]:
    tiny = TinyLMConfig(
        model=LMConfig(architecture="qwen2", vocab_size=16, hidden_size=32, intermediate_size=64, num_layers=1,
                       num_heads=2, num_kv_heads=1, head_dim=16, tie_word_embeddings=True),
        num_train=512, num_eval=64, batch_size=8, steps=20, seq_len=32, log_every=10, eval_every=20,
        max_len=4)
    demo = TinyLMConfig()
    return {"tiny": tiny, "demo": demo}
