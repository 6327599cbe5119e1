"""A tiny random decoder for the core.rl tests (session-scoped so it compiles once)."""

import pytest

from core.lm import weights as weights_lib
from core.lm.configs import LMConfig

TINY = LMConfig(architecture="llama", vocab_size=40, hidden_size=32, intermediate_size=48, num_layers=2,
                num_heads=4, num_kv_heads=2, head_dim=8, attention_bias=False, tie_word_embeddings=False)


@pytest.fixture(scope="session")
def tiny_policy():
    """(config, graphdef, params) with weights large enough to give peaked logits."""
    graphdef, params = weights_lib.params_from_hf_tensors(TINY, weights_lib.random_hf_tensors(TINY, 7, scale=0.3))
    return TINY, graphdef, params


class DigitTokenizer:
    """Token t <-> the word 't' (ids >= 10 only, so observations never contain low ids used as stops)."""

    def encode(self, text):
        return [int(w) for w in text.split() if w.isdigit() and 10 <= int(w) < 40] or (
            [10 + (sum(map(ord, text)) % 30)] if text else [])

    def decode(self, ids):
        return " ".join(str(int(t)) for t in ids)


@pytest.fixture
def tokenizer():
    return DigitTokenizer()
