"""The paper preset's cross-tokenizer alignment (first / longest) on hand-built tokenizers, the generated
instruction data, and the missing-folder error."""

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from core.config import BadInputError
from core.lm.tokenizer import Tokenizer
from interp.c2c.configs import presets
from interp.c2c.hf import align_tokens, instruction_data, run_hf


def _tokenizers():
    receiver = HFTokenizer(models.WordLevel({"hello": 0, "he": 1, "low": 2, "[UNK]": 3}, unk_token="[UNK]"))
    receiver.pre_tokenizer = pre_tokenizers.Whitespace()
    vocab = {"h": 0, "e": 1, "l": 2, "o": 3, "w": 4, "he": 5, "ll": 6, "llo": 7, "lo": 8}
    sharer = HFTokenizer(models.BPE(vocab, [("h", "e"), ("l", "l"), ("ll", "o"), ("l", "o")]))
    sharer.pre_tokenizer = pre_tokenizers.Whitespace()
    return Tokenizer(receiver, pad_token=None, eos_token=None), Tokenizer(sharer, pad_token=None, eos_token=None)


def test_alignment_maps_each_receiver_token_to_one_sharer_token():
    r, s = _tokenizers()
    assert s.encode("hello") == [5, 7] and s.encode("low") == [8, 4]  # he + llo; lo + w
    ids = r.encode("hello he low")
    assert ids == [0, 1, 2]
    assert align_tokens(ids, r, s, "first") == [5, 5, 8]     # he | he (spelt alike) | lo
    assert align_tokens(ids, r, s, "longest") == [7, 5, 8]   # llo (3 chars) over he | he | lo over w
    assert len(align_tokens(ids * 3, r, s, "longest")) == 9  # the receiver's length, so positions line up
    with pytest.raises(BadInputError, match="align_strategy='middle': expected one of"):
        align_tokens(ids, r, s, "middle")


def test_instruction_data_is_local_and_reproducible():
    a, b = instruction_data(50, seed=3), instruction_data(50, seed=3)
    assert a == b and len(a) == 50 and a != instruction_data(50, seed=4)
    for instruction, response in a:
        if instruction.startswith("What is") and "plus" in instruction:
            x, y = (int(t) for t in instruction.removeprefix("What is ").split("?")[0].split(" plus "))
            assert response == str(x + y)


def test_the_paper_preset_without_weights_is_one_clear_error(tmp_path):
    import dataclasses
    config = dataclasses.replace(presets()["paper"], receiver_path=str(tmp_path / "Qwen3-0.6B"),
                                 sharer_path=str(tmp_path / "Qwen2.5-0.5B-Instruct"))
    with pytest.raises(BadInputError, match="receiver_path=.*expected a HuggingFace folder with config.json"):
        run_hf(config)
