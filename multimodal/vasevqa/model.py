"""VaseVLM at toy scale: `multimodal.vlm` reading the six views as one 18-channel image (a patch encoder over
the stacked views), a word-level tokenizer, and the three training stages' losses.

- base: full training of vision tower + LM on lay descriptions (`data.lay_caption`), the stand-in for a
  general-purpose VLM that knows what it sees but not the archaeological vocabulary;
- SFT: LoRA (rank 8, alpha 32) on all seven linear layers of every LM block, vision tower and LM base weights
  frozen; next-token loss on the answer only;
- GRPO: the LoRA-merged LM fully trained (vision frozen) on group-normalised advantages of the attribute
  reward, with a k3 KL to the SFT model (`core.rl`), one update per rollout (ratio 1, as ms-swift's default
  single iteration), sequence-mean token-mean aggregation.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from core.config import BadInputError
from core.lm import lora as lora_lib
from core.lm.configs import LMConfig
from core.lm.generate import SamplingConfig, pad_prompts
from core.rl.losses import LossConfig, policy_loss
from multimodal import vlm

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
ALL_LINEAR = lora_lib.TARGETS


@dataclasses.dataclass(frozen=True)
class WordTokenizer:
    """Whitespace words (punctuation stays on its word, so decoding with spaces gives the text back)."""

    words: tuple[str, ...]

    @classmethod
    def build(cls, texts: Sequence[str]) -> WordTokenizer:
        return cls(tuple(sorted({w for t in texts for w in t.split()})))

    @property
    def vocab_size(self) -> int:
        return len(SPECIALS) + len(self.words)

    @property
    def _ids(self) -> dict[str, int]:
        return {w: len(SPECIALS) + i for i, w in enumerate(self.words)}

    def encode(self, text: str) -> list[int]:
        ids = self._ids
        return [ids.get(w, UNK) for w in text.split()]

    def encode_prompt(self, prompt: str) -> list[int]:
        return [BOS] + self.encode(prompt)

    def decode(self, tokens: Sequence[int]) -> str:
        out = []
        for t in tokens:
            t = int(t)
            if t == EOS:
                break
            if t >= len(SPECIALS):
                out.append(self.words[t - len(SPECIALS)])
        return " ".join(out)

    def save(self, path: str | pathlib.Path) -> None:
        pathlib.Path(path).write_text(json.dumps({"words": self.words}))

    @classmethod
    def load(cls, path: str | pathlib.Path) -> WordTokenizer:
        return cls(tuple(json.loads(pathlib.Path(path).read_text())["words"]))


def vlm_config(config, vocab_size: int) -> vlm.VLMConfig:
    heads = config.num_heads
    return vlm.VLMConfig(
        vision=vlm.ViTConfig(image_size=config.image_size, patch_size=config.patch_size, channels=18,
                             width=config.vit_width, depth=config.vit_depth, heads=max(1, config.vit_width // 16)),
        lm=LMConfig(vocab_size=vocab_size, hidden_size=config.hidden_size, intermediate_size=2 * config.hidden_size,
                    num_layers=config.num_layers, num_heads=heads, num_kv_heads=heads,
                    head_dim=config.hidden_size // heads, max_position_embeddings=256))


def lora_config(config) -> lora_lib.LoraConfig:
    return lora_lib.LoraConfig(rank=config.lora_rank, alpha=config.lora_alpha, targets=ALL_LINEAR)


def training_batch(tokenizer: WordTokenizer, images: np.ndarray, prompts: Sequence[str], answers: Sequence[str],
                   length: int) -> dict[str, np.ndarray]:
    """Right-padded `[<bos> prompt][answer <eos>]` rows, the loss on the answer only."""
    b = len(prompts)
    if len(answers) != b or len(images) != b:
        raise BadInputError(f"{len(images)} images, {b} prompts, {len(answers)} answers: expected equal counts")
    tokens = np.zeros((b, length), np.int32)
    mask = np.zeros((b, length), bool)
    loss_mask = np.zeros((b, length), bool)
    for i, (p, a) in enumerate(zip(prompts, answers)):
        pt, at = tokenizer.encode_prompt(p), tokenizer.encode(a) + [EOS]
        row = (pt + at)[:length]
        tokens[i, :len(row)] = row
        mask[i, :len(row)] = True
        loss_mask[i, len(pt):len(row)] = True
    return {"images": np.asarray(images, np.float32), "tokens": tokens, "mask": mask, "loss_mask": loss_mask}


def _nll(lp, batch):
    target = jnp.asarray(batch["loss_mask"], bool) & jnp.asarray(batch["mask"], bool)
    count = jnp.maximum(target.sum(), 1)
    return -jnp.where(target, lp, 0.0).sum() / count, target.sum()


def make_sft_loss(model: vlm.VLM, lcfg: lora_lib.LoraConfig):
    """LoRA SFT: params = {"lora"}; frozen = {"vision", "lm"} (the ViT frozen, as the paper's recipe)."""
    def loss_fn(params, batch, key, frozen):
        lora = lora_lib.LoraInputs(params["lora"], lcfg, key=key)
        lp = vlm.answer_logprobs(model, frozen["vision"], frozen["lm"], batch, lora=lora)
        nll, count = _nll(lp, batch)
        return nll, {"answer_nll": nll, "tokens": count}
    return loss_fn


def make_grpo_loss(model: vlm.VLM, loss_config: LossConfig):
    """GRPO on the LM: params = {"lm"}; frozen = {"vision", "ref"}; batch adds `advantages` (N,)."""
    def loss_fn(params, batch, key, frozen):
        del key
        lp = vlm.answer_logprobs(model, frozen["vision"], params["lm"], batch)
        ref = jax.lax.stop_gradient(vlm.answer_logprobs(model, frozen["vision"], frozen["ref"], batch))
        mask = jnp.asarray(batch["loss_mask"], bool) & jnp.asarray(batch["mask"], bool)
        adv = jnp.broadcast_to(batch["advantages"][:, None], lp.shape)
        loss, metrics = policy_loss(lp, jax.lax.stop_gradient(lp), ref, adv, mask, None, loss_config)
        return loss, metrics
    return loss_fn


class Sampler:
    """Jitted generation for one (batch size, sampling) pair: images (B, H, W, 18), the caption prompt for
    every row -> (tokens (B, N), mask (B, N))."""

    def __init__(self, model: vlm.VLM, tokenizer: WordTokenizer, prompt: str, batch: int, sampling: SamplingConfig):
        self.model, self.tokenizer, self.batch, self.sampling = model, tokenizer, batch, sampling
        encoded = tokenizer.encode_prompt(prompt)
        self.prompt_tokens, self.prompt_mask = pad_prompts([encoded] * batch, length=len(encoded))

        def run(vision_params, lm_params, images, tokens, mask, key):
            out = vlm.generate(model, images, tokens, mask, key, sampling, vision_params=vision_params,
                               lm_params=lm_params)
            return out.tokens, out.mask

        self._run = jax.jit(run)

    def __call__(self, vision_params, lm_params, images: np.ndarray, key: jax.Array) -> tuple[np.ndarray, np.ndarray]:
        n = len(images)
        if n > self.batch:
            raise BadInputError(f"{n} images: expected at most the sampler's batch of {self.batch}")
        pad = np.zeros((self.batch - n, *images.shape[1:]), np.float32)
        images = np.concatenate([np.asarray(images, np.float32), pad])
        tokens, mask = self._run(vision_params, lm_params, jnp.asarray(images), jnp.asarray(self.prompt_tokens),
                                 jnp.asarray(self.prompt_mask), key)
        return np.asarray(tokens)[:n], np.asarray(mask)[:n]

    def captions(self, vision_params, lm_params, images: np.ndarray, key: jax.Array) -> list[str]:
        out = []
        for start in range(0, len(images), self.batch):
            tokens, _ = self(vision_params, lm_params, images[start:start + self.batch],
                             jax.random.fold_in(key, start))
            out += [self.tokenizer.decode(row) for row in tokens]
        return out


def rollout_batch(prompt_tokens: np.ndarray, completions: np.ndarray, completion_mask: np.ndarray,
                  images: np.ndarray, advantages: np.ndarray) -> dict[str, np.ndarray]:
    """`[prompt][completion]` rows for the GRPO loss: the prompt is the same for every row (no padding)."""
    n, p = len(completions), prompt_tokens.shape[1]
    tokens = np.concatenate([np.repeat(prompt_tokens[:1], n, 0), completions], 1).astype(np.int32)
    mask = np.concatenate([np.ones((n, p), bool), completion_mask.astype(bool)], 1)
    loss_mask = np.concatenate([np.zeros((n, p), bool), completion_mask.astype(bool)], 1)
    return {"images": np.asarray(images, np.float32), "tokens": tokens, "mask": mask, "loss_mask": loss_mask,
            "advantages": np.asarray(advantages, np.float32)}
