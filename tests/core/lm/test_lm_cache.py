"""KV cache export / import: a prompt's cache exported and imported into a fresh cache decodes exactly as
the original; imported at shifted positions (the receiver's frame) it decodes the same (rotary is
relative); a section from another config is an error."""

import dataclasses

import jax
import numpy as np
import pytest

from core.lm import model as model_lib
from core.lm.cache import export_kv, import_kv
from core.lm.generate import SamplingConfig, decode, pad_prompts, prefill, start_state

PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]]
N = 6


def _decode(graphdef, params, cache, logits):
    return decode(graphdef, params, start_state(cache, logits), jax.random.key(0), SamplingConfig(max_new_tokens=N))


@pytest.fixture(scope="module")
def prefilled(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    logits, cache = jax.jit(lambda p: prefill(graphdef, p, tokens, mask, cache_size=8 + N))(params)
    return logits, cache, _decode(graphdef, params, cache, logits)


def test_export_import_decodes_identically(tiny_lm, prefilled):
    config, graphdef, params, apply = tiny_lm
    logits, cache, reference = prefilled
    section = export_kv(cache, config, 0, 8)
    assert section.k.shape == (config.num_layers, 3, 8, config.num_kv_heads, config.head_dim)
    # the un-rotated keys are what the projection gives: position 0 is unrotated in both
    np.testing.assert_allclose(np.asarray(section.k[:, 0, 5]), np.asarray(cache.k[:, 0, 5]), atol=1e-6)
    fresh = import_kv(model_lib.init_cache(config, 3, 8 + N), config, section, at=0)
    for field in ("valid", "positions", "index", "lengths"):
        np.testing.assert_array_equal(np.asarray(getattr(fresh, field)), np.asarray(getattr(cache, field)))
    np.testing.assert_allclose(np.asarray(fresh.k), np.asarray(cache.k), atol=1e-5)
    out = _decode(graphdef, params, fresh, logits)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(reference.tokens))
    np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(reference.logprobs), atol=1e-5)


def test_import_at_shifted_positions_and_slots_decodes_the_same(tiny_lm, prefilled):
    """Written 3 slots later at positions + 11: attention sees the same relative positions."""
    config, graphdef, params, apply = tiny_lm
    logits, cache, reference = prefilled
    section = export_kv(cache, config, 0, 8)
    moved = import_kv(model_lib.init_cache(config, 3, 3 + 8 + N), config, section, at=3,
                      positions=section.positions + 11)
    assert int(moved.index) == 11 and list(np.asarray(moved.lengths)) == [len(p) + 11 for p in PROMPTS]
    out = _decode(graphdef, params, moved, logits)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(reference.tokens))
    np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(reference.logprobs), atol=1e-4)
    # without re-rotation (keys left in the old frame) the decode differs: the test can fail
    stale = moved._replace(k=jax.lax.dynamic_update_slice_in_dim(moved.k, cache.k[:, :, :8], 3, 2))
    assert not np.allclose(np.asarray(_decode(graphdef, params, stale, logits).logprobs),
                           np.asarray(reference.logprobs), atol=1e-3)


def test_sections_from_another_config_are_errors(tiny_lm, prefilled):
    config, graphdef, params, apply = tiny_lm
    logits, cache, _ = prefilled
    section = export_kv(cache, config, 0, 8)
    other = dataclasses.replace(config, num_kv_heads=1)
    with pytest.raises(ValueError, match="another config"):
        import_kv(model_lib.init_cache(other, 3, 16), other, section)
    with pytest.raises(ValueError, match="expected a slot"):
        import_kv(model_lib.init_cache(config, 3, 10), config, section, at=5)
    with pytest.raises(ValueError, match="inside the cache"):
        export_kv(cache, config, 10, 8)


def test_decode_cache_round_trip_and_forward_equal_the_stacked_cache(tiny_lm, prefilled):
    """decode's loop layout (per layer, keys and values KV-head major) holds the same values, and a forward over
    it (one token, then three) gives the logits, attention patterns and cache of the stacked KVCache."""
    from core.lm.hooks import Capture, Hooks

    config, graphdef, params, apply = tiny_lm
    _, cache, _ = prefilled
    dc = model_lib.to_decode_cache(cache)
    assert dc.size == cache.size and dc.k[0].shape == (3, config.num_kv_heads, cache.size, config.head_dim)
    assert dc.v[0].shape == (3, config.num_kv_heads, config.head_dim, cache.size)
    # the value layout is a real transpose (d, s), not a reshape: slot 5 of row 1 reads the same vector
    np.testing.assert_array_equal(np.asarray(dc.v[1][1, :, :, 5]), np.asarray(cache.v[1, 1, 5]))
    back = model_lib.from_decode_cache(dc)
    for a, b in zip(back, cache):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    hooks = Hooks(capture=Capture(patterns=True))
    for tokens in (np.array([[3], [4], [5]]), np.array([[3, 1, 2], [4, 4, 4], [5, 6, 7]])):
        mask = np.ones_like(tokens, bool)
        mask[2, 0] = False  # a row that feeds a pad first
        ref = apply(params, tokens, attention_mask=mask, cache=cache, hooks=hooks)
        got = apply(params, tokens, attention_mask=mask, cache=dc, hooks=hooks)
        assert isinstance(got.cache, model_lib.DecodeCache)
        np.testing.assert_allclose(np.asarray(got.logits), np.asarray(ref.logits), atol=1e-5)
        np.testing.assert_allclose(np.asarray(got.captured["patterns"]), np.asarray(ref.captured["patterns"]),
                                   atol=1e-6)
        for a, b in zip(model_lib.from_decode_cache(got.cache), ref.cache):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def test_decode_cache_of_another_config_or_with_the_kernel_is_an_error(tiny_lm, prefilled):
    config, graphdef, params, apply = tiny_lm
    _, cache, _ = prefilled
    other = dataclasses.replace(config, num_kv_heads=1)
    wrong = model_lib.to_decode_cache(model_lib.init_cache(other, 3, cache.size))
    with pytest.raises(ValueError, match="another config"):
        model_lib.apply(graphdef, params, np.ones((3, 1), np.int32), cache=wrong)
    with pytest.raises(ValueError, match="expected a KVCache"):
        model_lib.apply(graphdef, params, np.ones((3, 1), np.int32), cache=model_lib.to_decode_cache(cache),
                        use_kernel=True)
