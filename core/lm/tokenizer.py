"""Tokenizers through the `tokenizers` library: load a `tokenizer.json`, train small ones, Qwen chat format
(ChatML, rendered by `core.lm.chat`).

Nothing is downloaded: `load_tokenizer` reads a local file or folder, `train_word_level` / `train_bpe` build
tokenizers from synthetic text in memory.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
DEFAULT_SPECIALS = (PAD, BOS, EOS, UNK, IM_START, IM_END)


class Tokenizer:
    """A thin wrapper: encode/decode, batch encode with left padding, special-token ids."""

    def __init__(self, tok: HFTokenizer, *, pad_token: str | None = PAD, eos_token: str | None = EOS,
                 bos_token: str | None = None):
        self.tok = tok
        self.pad_id = self._id(pad_token) if pad_token else None
        self.eos_id = self._id(eos_token) if eos_token else None
        self.bos_id = self._id(bos_token) if bos_token else None

    def _id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int:
        i = self.tok.token_to_id(token)
        if i is None:
            raise ValueError(f"token {token!r}: expected a token of this vocabulary")
        return i

    def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
        ids = self.tok.encode(text, add_special_tokens=False).ids
        return ([self.bos_id] if add_bos and self.bos_id is not None else []) + ids

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def encode_batch(self, texts: Sequence[str], *, length: int | None = None, bucket: int = 16
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Left-padded (tokens, mask) for generation, see core.lm.generate.pad_prompts."""
        from core.lm.generate import pad_prompts

        return pad_prompts([self.encode(t) for t in texts], pad_id=self.pad_id or 0, length=length, bucket=bucket)

    def save(self, path: str | pathlib.Path) -> pathlib.Path:
        path = pathlib.Path(path)
        if path.suffix != ".json":
            path.mkdir(parents=True, exist_ok=True)
            path = path / "tokenizer.json"
        self.tok.save(str(path))
        return path


def load_tokenizer(path: str | pathlib.Path, **kwargs) -> Tokenizer:
    """Load `tokenizer.json` (a file or a model folder holding one)."""
    path = pathlib.Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.exists():
        raise ValueError(f"tokenizer path {str(path)!r}: expected an existing tokenizer.json")
    tok = HFTokenizer.from_file(str(path))
    specials = {t: tok.token_to_id(t) for t in (PAD, EOS, "<|endoftext|>", IM_END)}
    kwargs.setdefault("pad_token", PAD if specials[PAD] is not None else
                      ("<|endoftext|>" if specials["<|endoftext|>"] is not None else None))
    kwargs.setdefault("eos_token", EOS if specials[EOS] is not None else
                      (IM_END if specials[IM_END] is not None else None))
    return Tokenizer(tok, **kwargs)


def train_word_level(texts: Iterable[str], *, specials: Sequence[str] = DEFAULT_SPECIALS) -> Tokenizer:
    """A whitespace/punctuation word-level tokenizer over every word in `texts` (for synthetic tasks)."""
    tok = HFTokenizer(models.WordLevel(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=list(specials), min_frequency=1))
    return Tokenizer(tok)


def train_bpe(texts: Iterable[str], *, vocab_size: int = 512, specials: Sequence[str] = DEFAULT_SPECIALS
              ) -> Tokenizer:
    """A byte-level BPE tokenizer (lossless round trip on any text)."""
    tok = HFTokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return Tokenizer(tok)


def chat_format(messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True,
                system: str | None = None) -> str:
    """Qwen-style ChatML: `<|im_start|>role\\ncontent<|im_end|>\\n` per message, then the assistant header.

    A thin call of `core.lm.chat.apply_chat_template` with `CHATML_TEMPLATE`; for a model's own template (tools,
    tool calls, Llama-3 headers) use `core.lm.chat.ChatTemplate.from_tokenizer_config(folder).render(...)`.
    """
    from core.lm.chat import CHATML_TEMPLATE, apply_chat_template

    for m in messages:
        role, content = m.get("role"), m.get("content")
        if role not in ("system", "user", "assistant", "tool") or not isinstance(content, str):
            raise ValueError(f"message {dict(m)!r}: expected role in system/user/assistant/tool and str content")
    messages = list(messages)
    if system is not None and not (messages and messages[0].get("role") == "system"):
        messages.insert(0, {"role": "system", "content": system})
    if not messages:
        return f"{IM_START}assistant\n" if add_generation_prompt else ""
    return apply_chat_template(CHATML_TEMPLATE, messages, add_generation_prompt=add_generation_prompt,
                               template_name="ChatML (core.lm.tokenizer.chat_format)")
