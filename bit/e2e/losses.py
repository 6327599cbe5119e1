"""Pure losses of the end-to-end stages, for `core.train.make_train_step` (`(params, batch, key, frozen)`).

- `make_e2e_loss`: next-token cross-entropy on the sentence (and its end token) given
  `<neural> projected encoder tokens </neural> prompt`, plus `contrastive_weight` x the symmetric InfoNCE
  between the mean-pooled projected neural tokens and the mean-pooled input-id text embeddings (prompt and
  sentence, as the paper; or the sentence alone), each through its own head (paper 1, stage 3).
- `make_speech_loss`: the audio-LLM analogue's pretraining, the same cross-entropy on simulated speech frames
  through an audio projector, with the whole LM trained.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bit.e2e.model import assemble, info_nce, patch_mask, pooled
from bit.losses import augment, span_mask
from core.lm import lora as lora_lib
from core.lm import model as lm_model
from core.lm.logprobs import chunked_logprobs


@dataclasses.dataclass(frozen=True)
class Layout:
    """What every row shares: the delimiter and prompt ids, and the modules' graph definitions."""

    lm_graphdef: nnx.GraphDef
    bridge_graphdef: nnx.GraphDef
    open_ids: np.ndarray
    close_ids: np.ndarray
    prompt: np.ndarray


def target_logprobs(layout: Layout, lm_params: Any, prefix: jax.Array, prefix_mask: jax.Array,
                    targets: jax.Array, target_mask: jax.Array, lora: lora_lib.LoraInputs | None = None
                    ) -> jax.Array:
    """Teacher-forced log p(target_t | prefix, prompt, targets < t), (B, T)."""
    seq = assemble(layout.lm_graphdef, lm_params, prefix, prefix_mask, layout.open_ids, layout.close_ids,
                   layout.prompt, targets, target_mask)
    lm = nnx.merge(layout.lm_graphdef, lm_params, copy=True)
    hidden = lm(inputs_embeds=seq.embeds, attention_mask=seq.mask, return_hidden=True, lora=lora).hidden
    return chunked_logprobs(hidden[:, seq.start - 1:-1], lm.unembedding(), jnp.asarray(targets, jnp.int32))


def _nll(lp: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    w = mask.astype(jnp.float32)
    n = jnp.maximum(w.sum(), 1.0)
    return -(lp * w).sum() / n, ((lp > jnp.log(0.5)) * w).sum() / n


def encode_neural(encoder: nnx.Module, batch: dict, key: jax.Array | None, *, patch: int, mask_ratio: float,
                  max_span: int, masking: bool, noise_sd: float, offset_sd: float) -> jax.Array:
    """The encoder's tokens (B, P, d); with a key, the training augmentation (noise, offsets, span masking when
    `masking`) and dropout, as in the encoder's CTC stage."""
    x = batch["x"]
    mask = kd = None
    if key is not None:
        ka, km, kd = jax.random.split(key, 3)
        x = augment(x, ka, noise_sd, offset_sd)
        if masking:
            mask = span_mask(km, x.shape[0], x.shape[1] // patch, mask_ratio, max_span)
    return encoder.encode(x, batch["session"], batch["length"], mask, kd, batch["dataset"])


def make_e2e_loss(layout: Layout, encoder_graphdef: nnx.GraphDef, config) -> Callable:
    """loss_fn(params, batch, key, frozen): params {"bridge", "lora"[, "encoder"]}, frozen {"lm"[, "encoder"]}.
    batch: the encoder keys (x, length, session, dataset), target / target_mask (B, T). `config`: bit.e2e Config."""
    e, m, t = config.e2e, config.base.model, config.base.train
    lcfg = lora_config(config)

    def loss_fn(params, batch, key, frozen):
        k_enc, k_lora = jax.random.split(key)
        encoder = nnx.merge(encoder_graphdef, params["encoder"] if "encoder" in params else frozen["encoder"])
        h = encode_neural(encoder, batch, k_enc, patch=m.patch, mask_ratio=m.mask_ratio, max_span=m.max_span,
                          masking=m.finetune_masking, noise_sd=t.noise_sd, offset_sd=t.offset_sd)
        bridge = nnx.merge(layout.bridge_graphdef, params["bridge"])
        tokens = bridge.projector(h)
        valid = patch_mask(batch["length"], h.shape[1], m.patch)
        lp = target_logprobs(layout, frozen["lm"], tokens, valid, batch["target"], batch["target_mask"],
                             lora_lib.LoraInputs(params["lora"], lcfg, key=k_lora))
        ce, top = _nll(lp, batch["target_mask"])
        metrics = {"ce": ce, "target_p_above_half": top, "tokens": batch["target_mask"].sum()}
        if e.contrastive_weight == 0:
            return ce, metrics
        nce, acc = info_nce(bridge.neural_head(pooled(tokens, valid)),
                            bridge.text_head(text_embedding(layout, frozen["lm"], batch, e.contrastive_text)),
                            bridge.log_scale[...], e.max_logit_scale)
        metrics.update(info_nce=nce, batch_retrieval=acc,
                       logit_scale=jnp.minimum(jnp.exp(bridge.log_scale[...]), e.max_logit_scale))
        return ce + e.contrastive_weight * nce, metrics

    return loss_fn


def text_embedding(layout: Layout, lm_params: Any, batch: dict, which: str) -> jax.Array:
    """Mean input-id embedding of each row's text (B, D): prompt and sentence, or the sentence alone."""
    target, target_mask = jnp.asarray(batch["target"], jnp.int32), jnp.asarray(batch["target_mask"], bool)
    B = target.shape[0]
    if which == "prompt+sentence":
        prompt = jnp.broadcast_to(jnp.asarray(layout.prompt), (B, len(layout.prompt)))
        target = jnp.concatenate([prompt, target], axis=1)
        target_mask = jnp.concatenate([jnp.ones(prompt.shape, bool), target_mask], axis=1)
    return pooled(lm_model.embed(layout.lm_graphdef, lm_params, target), target_mask)


def make_speech_loss(layout: Layout) -> Callable:
    """loss_fn(params, batch, key): params {"lm", "bridge"} (the whole LM and the audio projector); batch:
    frames (B, P, speech_dim), frame_mask (B, P), target / target_mask (B, T)."""

    def loss_fn(params, batch, key):
        del key
        bridge = nnx.merge(layout.bridge_graphdef, params["bridge"])
        lp = target_logprobs(layout, params["lm"], bridge.projector(batch["frames"]), batch["frame_mask"],
                             batch["target"], batch["target_mask"])
        ce, top = _nll(lp, batch["target_mask"])
        return ce, {"target_p_above_half": top, "tokens": batch["target_mask"].sum()}

    return loss_fn


def lora_config(config) -> lora_lib.LoraConfig:
    e = config.e2e
    return lora_lib.LoraConfig(rank=e.lora_rank, alpha=e.lora_alpha, dropout=e.lora_dropout, targets=e.lora_targets)
