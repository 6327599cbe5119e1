"""A small trainable vision-language model shared by the multimodal methods (IndicVisionBench, VaseVQA).

LLaVA's recipe at toy scale: a ViT patch encoder (nnx) turns an image into N patch features, a projector maps
them to the language model's width, and a `core.lm` decoder reads `[image tokens][text]` through
`inputs_embeds`. Fine-tuning is either full (vision tower + LM) or LoRA on the LM (its base weights in
`core.train`'s frozen slot, never updated) with the vision tower trained; the loss is next-token cross-entropy
on the answer tokens only (`loss_mask`), never on the image positions or the prompt.

    config = VLMConfig(vision=ViTConfig(image_size=32, patch_size=8), lm=LMConfig(vocab_size=..., ...))
    model = init_vlm(config, jax.random.key(0))
    loss_fn = make_loss(model, lora=LoraConfig(rank=8))           # or lora=None: full fine-tuning
    params, frozen = trainable_params(model, lora_adapters)        # what core.train optimises / keeps frozen
    out = generate(model, images, prompt_tokens, prompt_mask, key, SamplingConfig(max_new_tokens=16))

Images are float (B, H, W, C) in [0, 1]. Prompts for `generate` are left-padded (`core.lm.pad_prompts`); the
image tokens are placed right before each row's first real token, so the prefix is left-padded as `core.lm`
expects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from core.config import ConfigError, check
from core.lm import lora as lora_lib
from core.lm import model as lm_model
from core.lm.configs import LMConfig
from core.lm.generate import GenerateOutput, SamplingConfig
from core.lm.generate import generate as lm_generate
from core.lm.logprobs import chunked_logprobs

PROJECTORS = ("linear", "mlp")
STEMS = ("patch", "conv")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ViTConfig:
    """A pre-norm ViT without a class token (SigLIP-style: every patch is an image token)."""

    image_size: int = 32
    patch_size: int = 8
    channels: int = 3
    width: int = 64
    depth: int = 2
    heads: int = 4
    mlp_ratio: int = 4
    # "patch": one patch_size x patch_size linear projection per patch (ViT). "conv": stride-2 3x3 convolutions
    # with GELU until the stride is patch_size, then a 1x1 projection (Xiao et al. 2021, "Early convolutions
    # help transformers see better"): the same token grid, but strokes finer than a patch survive to the tokens
    stem: str = "patch"

    def __post_init__(self):
        for name in ("image_size", "patch_size", "channels", "width", "depth", "heads", "mlp_ratio"):
            value = getattr(self, name)
            check(isinstance(value, int) and value >= 1, f"vision.{name}", value, "a positive integer")
        check(self.image_size % self.patch_size == 0, "vision.patch_size", self.patch_size,
              f"a divisor of vision.image_size={self.image_size}")
        check(self.width % self.heads == 0, "vision.heads", self.heads, f"a divisor of vision.width={self.width}")
        check(self.stem in STEMS, "vision.stem", self.stem, f"one of {STEMS}")
        if self.stem == "conv":
            check(self.patch_size >= 2 and self.patch_size & (self.patch_size - 1) == 0, "vision.patch_size",
                  self.patch_size, "a power of two (the conv stem halves the image per layer)")

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclasses.dataclass(frozen=True, kw_only=True)
class VLMConfig:
    vision: ViTConfig = ViTConfig()
    lm: LMConfig = LMConfig()
    projector: str = "mlp"  # "linear" or LLaVA-1.5's two-layer MLP with GELU

    def __post_init__(self):
        check(self.projector in PROJECTORS, "projector", self.projector, f"one of {PROJECTORS}")


class ViTBlock(nnx.Module):
    def __init__(self, c: ViTConfig, *, rngs: nnx.Rngs):
        self.norm1 = nnx.LayerNorm(c.width, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(num_heads=c.heads, in_features=c.width, decode=False, rngs=rngs)
        self.norm2 = nnx.LayerNorm(c.width, rngs=rngs)
        self.fc1 = nnx.Linear(c.width, c.mlp_ratio * c.width, rngs=rngs)
        self.fc2 = nnx.Linear(c.mlp_ratio * c.width, c.width, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(jax.nn.gelu(self.fc1(self.norm2(x))))


class VisionTower(nnx.Module):
    """Image (B, H, W, C) in [0, 1] -> image tokens (B, N, lm.hidden_size)."""

    def __init__(self, config: VLMConfig, *, rngs: nnx.Rngs):
        v, d = config.vision, config.lm.hidden_size
        self.config = config
        if v.stem == "patch":
            self.stem = nnx.List([])
            self.patch = nnx.Conv(v.channels, v.width, kernel_size=(v.patch_size, v.patch_size),
                                  strides=(v.patch_size, v.patch_size), padding="VALID", rngs=rngs)
        else:
            layers = v.patch_size.bit_length() - 1  # stride-2 layers to reach patch_size
            widths = [v.channels] + [max(8, v.width >> (layers - 1 - i)) for i in range(layers)]
            self.stem = nnx.List([nnx.Conv(a, b, kernel_size=(3, 3), strides=(2, 2), padding="SAME", rngs=rngs)
                                  for a, b in zip(widths[:-1], widths[1:])])
            self.patch = nnx.Conv(widths[-1], v.width, kernel_size=(1, 1), rngs=rngs)
        self.pos = nnx.Param(0.02 * jax.random.normal(rngs.params(), (1, v.num_patches, v.width)))
        self.blocks = nnx.List([ViTBlock(v, rngs=rngs) for _ in range(v.depth)])
        self.norm = nnx.LayerNorm(v.width, rngs=rngs)
        if config.projector == "linear":
            self.proj1 = nnx.Linear(v.width, d, rngs=rngs)
            self.proj2 = None
        else:
            self.proj1 = nnx.Linear(v.width, d, rngs=rngs)
            self.proj2 = nnx.Linear(d, d, rngs=rngs)

    def patch_grid(self, images: jax.Array) -> jax.Array:
        """The stem's output: one width-vector per patch, (B, H / patch, W / patch, width), before attention."""
        x = images.astype(jnp.float32) * 2.0 - 1.0
        for conv in self.stem:
            x = jax.nn.gelu(conv(x))
        return self.patch(x)

    def __call__(self, images: jax.Array) -> jax.Array:
        v = self.config.vision
        expected = (v.image_size, v.image_size, v.channels)
        if images.ndim != 4 or tuple(images.shape[1:]) != expected:
            raise ConfigError(f"images {tuple(images.shape)}: expected (B, {', '.join(map(str, expected))}) "
                              "floats in [0, 1]")
        x = self.patch_grid(images)
        x = x.reshape(x.shape[0], -1, x.shape[-1]) + self.pos[...]
        for block in self.blocks:
            x = block(x)
        x = self.proj1(self.norm(x))
        if self.proj2 is not None:
            x = self.proj2(jax.nn.gelu(x))
        return x


class VLM(NamedTuple):
    """The two halves as (graphdef, params) pairs, so each can be trained, frozen or sharded on its own."""

    config: VLMConfig
    vision_graphdef: nnx.GraphDef
    vision_params: nnx.State
    lm_graphdef: nnx.GraphDef
    lm_params: nnx.State


def init_vlm(config: VLMConfig, key: jax.Array, lm_params: nnx.State | None = None) -> VLM:
    """A fresh vision tower; the LM is fresh too unless `lm_params` (e.g. from `core.lm.load_hf`) are given."""
    k_vision, k_lm = jax.random.split(key)
    vision_graphdef, vision_params = nnx.split(VisionTower(config, rngs=nnx.Rngs(k_vision)))
    lm_graphdef, fresh = lm_model.init(config.lm, k_lm)
    return VLM(config, vision_graphdef, vision_params, lm_graphdef, fresh if lm_params is None else lm_params)


def encode_images(model: VLM, vision_params: nnx.State, images: jax.Array) -> jax.Array:
    return nnx.merge(model.vision_graphdef, vision_params, copy=True)(images)


def multimodal_inputs(model: VLM, vision_params: nnx.State, lm_params: nnx.State, images: jax.Array,
                      tokens: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`[image tokens][text]` as (inputs_embeds (B, N + T, D), mask (B, N + T)). The sequence is reordered per
    row so that padding comes first (a stable sort on the mask): left-padded prompts stay left-padded with the
    image right before their first real token; right-padded training rows get their pads moved to the front,
    which changes nothing (positions follow the mask)."""
    tokens = jnp.asarray(tokens, jnp.int32)
    mask = jnp.asarray(mask, bool)
    if tokens.ndim != 2 or mask.shape != tokens.shape or images.shape[0] != tokens.shape[0]:
        raise ConfigError(f"images {tuple(images.shape)}, tokens {tuple(tokens.shape)}, mask {tuple(mask.shape)}: "
                          "expected (B, H, W, C), (B, T) and (B, T) with the same B")
    image_tokens = encode_images(model, vision_params, images)
    text = lm_model.embed(model.lm_graphdef, lm_params, tokens)
    x = jnp.concatenate([image_tokens.astype(text.dtype), text], axis=1)
    full_mask = jnp.concatenate([jnp.ones(image_tokens.shape[:2], bool), mask], axis=1)
    order = jnp.argsort(full_mask.astype(jnp.int32), axis=1, stable=True)
    return jnp.take_along_axis(x, order[..., None], axis=1), jnp.take_along_axis(full_mask, order, axis=1)


def answer_logprobs(model: VLM, vision_params: nnx.State, lm_params: nnx.State, batch: dict[str, jax.Array], *,
                    lora: lora_lib.LoraInputs | None = None, chunk_size: int = 4096) -> jax.Array:
    """Teacher-forced log p(token t | image, tokens < t) for every text position (B, T). Batch: `images`,
    `tokens` (B, T) right-padded prompt + answer, `mask` (B, T)."""
    images, tokens, mask = batch["images"], jnp.asarray(batch["tokens"], jnp.int32), batch["mask"]
    n = model.config.vision.num_patches
    image_tokens = encode_images(model, vision_params, images)
    text = lm_model.embed(model.lm_graphdef, lm_params, tokens)
    x = jnp.concatenate([image_tokens.astype(text.dtype), text], axis=1)
    full_mask = jnp.concatenate([jnp.ones(image_tokens.shape[:2], bool), jnp.asarray(mask, bool)], axis=1)
    lm = nnx.merge(model.lm_graphdef, lm_params, copy=True)
    hidden = lm(inputs_embeds=x, attention_mask=full_mask, return_hidden=True, lora=lora).hidden
    # position n - 1 + t (the last image token, then each text token) predicts text token t
    return chunked_logprobs(hidden[:, n - 1:-1], lm.unembedding(), tokens, chunk_size=chunk_size)


def make_loss(model: VLM, *, lora: lora_lib.LoraConfig | None = None) -> Callable:
    """`loss_fn(params, batch, key, frozen) -> (loss, metrics)` for `core.train.make_train_step`.

    Full fine-tuning: params = {"vision", "lm"}, frozen unused. LoRA: params = {"vision", "lora"} (the
    adapters) and frozen = {"lm"}. The loss is the mean negative log-likelihood of the tokens where
    `loss_mask` is true (the answer), so the image and the prompt are never targets."""
    def loss_fn(params, batch, key, frozen=None):
        if lora is None:
            lm_params, lora_inputs = params["lm"], None
        else:
            lm_params = frozen["lm"]
            lora_inputs = lora_lib.LoraInputs(params["lora"], lora, key=key)
        lp = answer_logprobs(model, params["vision"], lm_params, batch, lora=lora_inputs)
        target = jnp.asarray(batch["loss_mask"], bool) & jnp.asarray(batch["mask"], bool)
        count = jnp.maximum(target.sum(), 1)
        nll = -jnp.where(target, lp, 0.0).sum() / count
        correct = jnp.where(target, lp > jnp.log(0.5), False).sum() / count  # the answer token is the argmax
        return nll, {"answer_nll": nll, "answer_p_above_half": correct, "tokens": target.sum()}
    return loss_fn


def trainable_params(model: VLM, adapters: Any = None) -> tuple[dict, dict | None]:
    """(params, frozen) for `core.train.init_train_state`: full fine-tuning without adapters, else LoRA."""
    if adapters is None:
        return {"vision": model.vision_params, "lm": model.lm_params}, None
    return {"vision": model.vision_params, "lora": adapters}, {"lm": model.lm_params}


def generate(model: VLM, images: jax.Array, tokens: jax.Array, mask: jax.Array, key: jax.Array,
             sampling: SamplingConfig = SamplingConfig(), *,
             vision_params: nnx.State | None = None, lm_params: nnx.State | None = None,
             lora: lora_lib.LoraInputs | None = None) -> GenerateOutput:
    """Image + left-padded prompt -> text, through `core.lm.generate` with the image tokens as a prefix."""
    vision_params = model.vision_params if vision_params is None else vision_params
    lm_params = model.lm_params if lm_params is None else lm_params
    embeds, full_mask = multimodal_inputs(model, vision_params, lm_params, images, tokens, mask)
    return lm_generate(model.lm_graphdef, lm_params, None, full_mask, key, sampling,
                                 inputs_embeds=embeds, lora=lora)
