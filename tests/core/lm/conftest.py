"""Shared tiny models for the core.lm tests (session-scoped so each config compiles once)."""

import jax
import pytest

from core.lm import weights as weights_lib
from core.lm.configs import LMConfig

TINY = LMConfig(architecture="llama", vocab_size=40, hidden_size=32, intermediate_size=48, num_layers=2,
                num_heads=4, num_kv_heads=2, head_dim=8, attention_bias=False, tie_word_embeddings=False)


@pytest.fixture(scope="session")
def tiny_lm():
    """(config, graphdef, params, jitted apply) with weights large enough to give peaked logits."""
    graphdef, params = weights_lib.params_from_hf_tensors(TINY, weights_lib.random_hf_tensors(TINY, 7, scale=0.3))
    apply = jax.jit(lambda p, tokens, **kw: __import__("core.lm.model", fromlist=["apply"]).apply(
        graphdef, p, tokens, **kw))
    return TINY, graphdef, params, apply
