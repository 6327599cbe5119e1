"""Tokenizers: trained word-level and BPE tokenizers on synthetic text, tokenizer.json round trip, ChatML."""

import numpy as np
import pytest

from core.lm.tokenizer import IM_END, IM_START, chat_format, load_tokenizer, train_bpe, train_word_level

TEXTS = [f"the key {k} maps to value {v} ." for k in ("red", "blue", "green") for v in ("one", "two", "three")]


def test_word_level_round_trip_and_specials(tmp_path):
    tok = train_word_level(TEXTS)
    ids = tok.encode("the key blue maps to value three .")
    assert len(ids) == 8 and tok.decode(ids) == "the key blue maps to value three ."
    assert tok.pad_id == 0 and tok.eos_id == 2  # specials first, in order
    assert tok.vocab_size == 6 + len({w for t in TEXTS for w in t.split()})
    assert tok.encode("the key purple")[-1] == tok.token_to_id("<unk>")
    path = tok.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert path.name == "tokenizer.json" and again.encode(TEXTS[4]) == tok.encode(TEXTS[4])
    tokens, mask = tok.encode_batch(["the key red", "value one"], bucket=4)
    assert tokens.shape == (2, 4) and mask.tolist() == [[False, True, True, True], [False, False, True, True]]
    assert tokens[1, 0] == tok.pad_id


def test_bpe_is_lossless_and_compresses():
    tok = train_bpe(TEXTS * 20, vocab_size=300)
    text = "the key green maps to value two . Unseen: ünïcode!"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(tok.encode(TEXTS[0])) < len(TEXTS[0].encode()) / 2  # merges learned


def test_chat_format_qwen_style():
    text = chat_format([{"role": "user", "content": "2+2?"}], system="You are terse.")
    assert text == (f"{IM_START}system\nYou are terse.{IM_END}\n{IM_START}user\n2+2?{IM_END}\n"
                    f"{IM_START}assistant\n")
    tok = train_word_level(TEXTS + ["system user assistant"])
    ids = tok.encode(text)
    assert ids[0] == tok.token_to_id(IM_START) and tok.token_to_id(IM_END) in ids
    with pytest.raises(ValueError, match="role"):
        chat_format([{"role": "bot", "content": "x"}])
    with pytest.raises(ValueError, match="tokenizer.json"):
        load_tokenizer("/nonexistent/folder")
    assert np.all(np.diff([len(chat_format([{"role": "user", "content": "a" * n}])) for n in range(3)]) == 1)
