"""Configs of BIT's end-to-end stage: the BIT encoder's tokens -> a projector -> a LoRA-adapted language model
trained with next-token cross-entropy plus a symmetric InfoNCE between the pooled neural tokens and the pooled
text embeddings (paper 1, stage 3; `../README.md`, "End-to-end").

Presets: `tiny` (tests, seconds), `demo` (`iclr26 run bit_e2e --preset demo`, a few minutes on 2 CPU cores),
`cpu` (the benchmark's base) and `paper` (a GPU with a local Qwen2.5-1.5B or Aero-1-Audio folder). Where the
released code and the paper differ (projector, LoRA targets, optimisation, decoding), the field says which
source its default follows.
"""

from __future__ import annotations

import dataclasses

from bit import configs as cascade_configs
from core.config import check

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PROMPT = "decode the above neural activity into an english sentence:"  # the paper's instruction, lower-cased
SPEECH_PROMPT = "transcribe the above speech into an english sentence:"


@dataclasses.dataclass(frozen=True, kw_only=True)
class LanguageModelConfig:
    """The language model. Without `path`, a small Qwen2-style decoder is trained here: on the generator's text
    (disjoint from every neural sentence), then, for `kind = speech`, to transcribe noisy continuous phoneme
    features (the analogue of the paper's audio LLM, Aero-1-Audio on Qwen2.5-1.5B). A `text` LM gets the same
    number of steps on text alone."""

    kind: str = "speech"  # "speech" (text- then speech-pretrained, the audio-LLM analogue) or "text" (text only)
    path: str = ""  # a local HuggingFace folder (config.json, safetensors, tokenizer.json); empty = trained here
    hidden_size: int = 128  # residual width of the LM trained here
    num_layers: int = 2  # decoder blocks of the LM trained here
    num_heads: int = 4  # query heads of the LM trained here
    num_kv_heads: int = 2  # key/value heads (grouped-query attention) of the LM trained here
    intermediate_size: int = 384  # SwiGLU width of the LM trained here
    vocab_size: int = 768  # byte-level BPE vocabulary trained on the LM text (ignored with `path`)
    text_steps: int = 1500  # next-token steps on the LM text
    speech_steps: int = 1500  # speech-transcription steps (kind=speech); kind=text trains this many more on text
    batch_size: int = 32  # LM pretraining batch
    lr: float = 2e-3  # peak learning rate of LM pretraining (AdamW, warmup + cosine)
    speech_dim: int = 64  # width of the simulated speech features (one frame per encoder patch)
    speech_noise: float = 0.7  # sd of the white noise on each unit-variance speech feature
    speech_jitter: float = 0.3  # sd of log phone duration in the simulated speech

    def __post_init__(self):
        check(self.kind in ("speech", "text"), "lm.kind", self.kind, "'speech' or 'text'")
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size", "vocab_size",
                     "batch_size", "speech_dim"):
            check(getattr(self, name) >= 1, f"lm.{name}", getattr(self, name), "an integer >= 1")
        check(self.hidden_size % self.num_heads == 0 and (self.hidden_size // self.num_heads) % 2 == 0,
              "lm.num_heads", self.num_heads, f"a divisor of lm.hidden_size={self.hidden_size} into even head sizes")
        check(self.num_heads % self.num_kv_heads == 0, "lm.num_kv_heads", self.num_kv_heads,
              f"a divisor of lm.num_heads={self.num_heads}")
        check(self.vocab_size >= 300, "lm.vocab_size", self.vocab_size,
              "at least 300 (the 256 bytes, the special tokens and some merges)")
        check(self.lr > 0, "lm.lr", self.lr, "a positive learning rate")
        check(self.speech_noise >= 0 and self.speech_jitter >= 0, "lm.speech_noise", self.speech_noise, ">= 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class E2ETrainConfig:
    """The end-to-end stage: the encoder (pretrained, CTC-only or random), projector, InfoNCE and LoRA settings."""

    encoder_init: str = "pretrained"  # "pretrained" (SSL then CTC, BIT), "ctc" (CTC only) or "scratch" (random)
    train_encoder: bool = True  # update the encoder end to end (false: frozen encoder)
    projector: str = "mlp"  # "mlp" (Linear-ReLU-Linear, the paper) or "linear" (the released code)
    lora_rank: int = 8  # LoRA rank r (paper: 8)
    lora_alpha: float = 32.0  # LoRA alpha (paper: 32)
    lora_dropout: float = 0.2  # dropout on the LoRA branch input (paper: 0.2)
    lora_targets: tuple[str, ...] = LORA_TARGETS  # adapted projections (released code: all; paper: q/k/v/o + FFN)
    contrastive_weight: float = 1.0  # weight of the InfoNCE term (paper: 1, unweighted); 0 = CE only
    contrastive_dim: int = 64  # shared width of the two InfoNCE heads (paper: 512)
    contrastive_text: str = "prompt+sentence"  # text side pooled over "prompt+sentence" ids (paper) or "sentence"
    temperature: float = 0.1  # initial InfoNCE temperature (learned; logit scale = 1 / temperature)
    max_logit_scale: float = 100.0  # cap of the learned logit scale
    steps: int = 2000  # end-to-end training steps
    batch_size: int = 16  # sentences per step (paper: 16 for T12, 8 for T15)
    lr: float = 2e-3  # peak learning rate of the projector, InfoNCE heads and LoRA adapters
    encoder_lr: float = 5e-4  # peak learning rate of the encoder (when trained)
    weight_decay: float = 1e-5  # AdamW weight decay (paper: 1e-5)
    warmup: int = 100  # linear warmup steps before the cosine decay
    log_every: int = 50  # steps between logged records

    def __post_init__(self):
        check(self.encoder_init in ("pretrained", "ctc", "scratch"), "e2e.encoder_init", self.encoder_init,
              "'pretrained', 'ctc' or 'scratch'")
        check(self.projector in ("mlp", "linear"), "e2e.projector", self.projector, "'mlp' or 'linear'")
        check(self.lora_rank >= 1, "e2e.lora_rank", self.lora_rank, "an integer >= 1")
        check(0.0 <= self.lora_dropout < 1.0, "e2e.lora_dropout", self.lora_dropout, "a number in [0, 1)")
        check(bool(self.lora_targets) and all(t in LORA_TARGETS for t in self.lora_targets), "e2e.lora_targets",
              self.lora_targets, f"a non-empty tuple of {LORA_TARGETS}")
        check(self.contrastive_weight >= 0, "e2e.contrastive_weight", self.contrastive_weight, ">= 0")
        check(self.contrastive_text in ("prompt+sentence", "sentence"), "e2e.contrastive_text",
              self.contrastive_text, "'prompt+sentence' or 'sentence'")
        check(self.temperature > 0 and self.max_logit_scale >= 1 / self.temperature, "e2e.temperature",
              self.temperature, f"> 0 with 1 / temperature <= max_logit_scale={self.max_logit_scale}")
        for name in ("contrastive_dim", "batch_size", "log_every"):
            check(getattr(self, name) >= 1, f"e2e.{name}", getattr(self, name), "an integer >= 1")
        check(self.lr > 0 and self.encoder_lr > 0, "e2e.lr", self.lr, "positive learning rates")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecodingConfig:
    """Sentence decoding: greedy and beam search (the released code offers both, at most 20 tokens; the paper
    samples with top-p 0.9, temperature 0.7, at most 25 tokens)."""

    max_new_tokens: int = 24  # longest decoded sentence, in tokens (the end token included)
    beam: int = 4  # beam width of the beam search
    n_best: int = 4  # hypotheses kept per sentence (the n-best list)
    length_penalty: float = 1.0  # a finished hypothesis scores sum log p / length ** length_penalty
    batch_size: int = 32  # test sentences decoded per call

    def __post_init__(self):
        check(self.max_new_tokens >= 1 and self.beam >= 1, "decode.max_new_tokens", self.max_new_tokens, ">= 1")
        check(1 <= self.n_best <= self.beam, "decode.n_best", self.n_best, f"in [1, decode.beam={self.beam}]")
        check(self.batch_size >= 1, "decode.batch_size", self.batch_size, "an integer >= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """`base`: the cascade experiment's config (simulator, data, encoder, its SSL / CTC stages and the n-gram
    cascade the end-to-end model is timed against; `base.train.seed` seeds the whole run); `lm`, `e2e`,
    `decode`: the end-to-end stage."""

    base: cascade_configs.Config = cascade_configs.Config()
    lm: LanguageModelConfig = LanguageModelConfig()
    e2e: E2ETrainConfig = E2ETrainConfig()
    decode: DecodingConfig = DecodingConfig()
    latency_sentences: int = 8  # test sentences timed one at a time, end to end and through the cascade
    show: int = 5  # decoded sentences printed beside the truth


def tiny() -> Config:
    """Tests: seconds. `iclr26 run bit_e2e --preset tiny`."""
    base = cascade_configs.tiny()
    return Config(base=base,
                  lm=LanguageModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                                         intermediate_size=64, vocab_size=300, text_steps=4, speech_steps=4,
                                         batch_size=8, speech_dim=16),
                  e2e=E2ETrainConfig(steps=4, batch_size=8, warmup=2, log_every=2, contrastive_dim=16),
                  decode=DecodingConfig(max_new_tokens=6, beam=2, n_best=2, batch_size=8),
                  latency_sentences=2, show=2)


def demo() -> Config:
    """`iclr26 run bit_e2e --preset demo` (300 s on the idle 2-core machine; WER 15.5 % beam, the cascade 3.1 %):
    the cascade demo's simulated sessions with 400 labelled sentences, a 2 x 128 LM text- then speech-pretrained,
    the BIT encoder pretrained and CTC-tuned, then trained end to end with LoRA and InfoNCE; greedy and beam WER
    on the test sentences, latency against the cascade."""
    base = cascade_configs.demo()
    base = dataclasses.replace(base, data=dataclasses.replace(base.data, sentences_per_session=100, labelled=400,
                                                              lm_sentences=8000),
                               train=dataclasses.replace(base.train, pretrain_steps=150, finetune_steps=350))
    return Config(base=base, lm=LanguageModelConfig(text_steps=600, speech_steps=1000),
                  e2e=E2ETrainConfig(steps=1200, warmup=50))


def cpu() -> Config:
    """The benchmark's base (benchmarks/bit_e2e.py sets the data sizes and steps): the cascade's `cpu` encoder."""
    return Config(base=cascade_configs.cpu())


def paper() -> Config:
    """A GPU run with a local LM folder (`--set lm.path=/models/Qwen2.5-1.5B`): the released encoder size, LoRA
    r 8 / alpha 32 / dropout 0.2 on all projections, lr 5e-5, batch 8, contrastive width 512. The simulated
    sessions stand in for the Dryad recordings unless `base.data` points at them (see the cascade README)."""
    return Config(base=cascade_configs.paper(),
                  lm=LanguageModelConfig(path="", text_steps=0, speech_steps=0),
                  e2e=E2ETrainConfig(steps=20_000, batch_size=8, lr=5e-5, encoder_lr=5e-5, contrastive_dim=512,
                                     warmup=500),
                  decode=DecodingConfig(max_new_tokens=25, beam=4))


PRESETS = {"tiny": tiny(), "demo": demo(), "cpu": cpu(), "paper": paper()}
