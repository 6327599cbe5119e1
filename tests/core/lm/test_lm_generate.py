"""Generation: cached greedy decode equals an uncached reference, stop tokens, log-probs, sampling filters,
no recompilation within a prompt-length bucket, the Pallas decode kernel path, and cache-size errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import CompileCounter

from core.lm import model as model_lib
from core.lm.generate import (
    SamplingConfig,
    append_tokens,
    continue_decoding,
    extend_cache,
    generate,
    pad_prompts,
    process_logits,
    sample_logits,
)

PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]]
N = 5


@pytest.fixture(scope="module")
def greedy(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    out = generate(graphdef, params, tokens, mask, jax.random.key(0), SamplingConfig(max_new_tokens=N))
    return out


def test_greedy_matches_uncached_reference(tiny_lm, greedy):
    """Teacher-force prompt + generated tokens through the cache-free forward (unpadded prompt, right
    padding only after the sequence): each generated token is the argmax there, with the same log-prob."""
    config, graphdef, params, apply = tiny_lm
    width = max(len(p) for p in PROMPTS) + N
    seqs = np.zeros((len(PROMPTS), width), np.int32)
    for b, prompt in enumerate(PROMPTS):
        seqs[b, :len(prompt) + N] = prompt + np.asarray(greedy.tokens[b]).tolist()
    logits = np.asarray(apply(params, jnp.asarray(seqs)).logits)
    for b, prompt in enumerate(PROMPTS):
        step_logits = logits[b, len(prompt) - 1:len(prompt) - 1 + N]
        np.testing.assert_array_equal(step_logits.argmax(-1), np.asarray(greedy.tokens[b]))
        lps = np.asarray(jax.nn.log_softmax(step_logits))[np.arange(N), np.asarray(greedy.tokens[b])]
        np.testing.assert_allclose(np.asarray(greedy.logprobs[b]), lps, atol=1e-5)
    assert bool(greedy.mask.all()) and greedy.tokens.shape == (3, N)
    assert len(set(np.asarray(greedy.tokens).ravel().tolist())) > 2  # not a degenerate constant output


def test_stop_tokens_pad_the_rest(tiny_lm, greedy):
    config, graphdef, params, apply = tiny_lm
    stop = int(greedy.tokens[1, 1])
    first = [int(np.argmax(np.asarray(greedy.tokens[b]) == stop)) if stop in np.asarray(greedy.tokens[b]) else N
             for b in range(3)]
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    out = generate(graphdef, params, tokens, mask, jax.random.key(0),
                   SamplingConfig(max_new_tokens=N, stop_tokens=(stop,), pad_id=39))
    for b in range(3):
        n = min(first[b] + 1, N)
        np.testing.assert_array_equal(np.asarray(out.tokens[b, :n]), np.asarray(greedy.tokens[b, :n]))
        assert (np.asarray(out.tokens[b, n:]) == 39).all() and (np.asarray(out.logprobs[b, n:]) == 0).all()
        assert int(out.lengths[b]) == n
    assert int(out.lengths[1]) == 2


def test_no_recompilation_within_a_bucket(tiny_lm, greedy):
    config, graphdef, params, apply = tiny_lm
    with CompileCounter() as counter:
        for prompts in ([[5, 6], [7, 8, 9, 10, 11], [12, 13, 14]], [[1] * 8, [2], [3, 4, 5, 6]]):
            tokens, mask = pad_prompts(prompts, bucket=8)
            generate(graphdef, params, tokens, mask, jax.random.key(1), SamplingConfig(max_new_tokens=N))
    assert counter.count == 0


def test_kernel_decode_path_matches(tiny_lm, greedy):
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    out = generate(graphdef, params, tokens, mask, jax.random.key(0), SamplingConfig(max_new_tokens=N),
                   use_kernel=True)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(greedy.tokens))
    np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(greedy.logprobs), atol=1e-5)


def test_sampling_filters():
    logits = jnp.asarray(np.log(np.array([[0.5, 0.3, 0.15, 0.05]] * 4000, np.float32)))
    keys = jax.random.key(3)
    k1 = sample_logits(logits, keys, temperature=1.0, top_k=1)
    assert (np.asarray(k1) == 0).all()
    k2 = np.asarray(sample_logits(logits, keys, temperature=1.0, top_k=2))
    assert set(np.unique(k2)) == {0, 1}
    np.testing.assert_allclose((k2 == 0).mean(), 0.5 / 0.8, atol=0.03)
    # top_p = 0.7: the nucleus is {0, 1} (0.5 < 0.7, 0.8 >= 0.7)
    p = np.asarray(sample_logits(logits, keys, temperature=1.0, top_p=0.7))
    assert set(np.unique(p)) == {0, 1}
    full = np.asarray(sample_logits(logits, keys, temperature=1.0))
    np.testing.assert_allclose(np.bincount(full, minlength=4) / len(full), [0.5, 0.3, 0.15, 0.05], atol=0.03)
    # temperature 0.5 squares the probabilities (renormalised)
    cold = np.asarray(sample_logits(logits, keys, temperature=0.5))
    q = np.array([0.5, 0.3, 0.15, 0.05]) ** 2
    np.testing.assert_allclose(np.bincount(cold, minlength=4) / len(cold), q / q.sum(), atol=0.03)
    assert (np.asarray(sample_logits(logits, keys)) == 0).all()  # greedy


def test_bad_inputs(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    with pytest.raises(ValueError, match="longer than the cache"):
        generate(graphdef, params, tokens, mask, jax.random.key(0), SamplingConfig(max_new_tokens=4), cache_size=8)
    with pytest.raises(ValueError, match="expected at most length=4"):
        pad_prompts(PROMPTS, length=4)
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0.0)
    with pytest.raises(ValueError, match="same"):
        generate(graphdef, params, tokens, mask[:, :3], jax.random.key(0))


def _stop_token(greedy):
    """A token that row 1 generates at step 1, so rows stop at different steps."""
    return int(greedy.tokens[1, 1])


def test_a_stopped_row_writes_nothing_more_to_the_cache(tiny_lm, greedy):
    """Regression: a stopped row fed its pad into the cache as a valid slot and counted it in `lengths`."""
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    out = generate(graphdef, params, tokens, mask, jax.random.key(0),
                   SamplingConfig(max_new_tokens=N, stop_tokens=(_stop_token(greedy),)))
    cache = out.state.cache
    for b, prompt in enumerate(PROMPTS):
        n = int(out.lengths[b])
        assert int(cache.lengths[b]) == len(prompt) + n  # prompt + generated, the stop token included
        assert int(np.asarray(cache.valid[b]).sum()) == len(prompt) + n
        valid_positions = np.asarray(cache.positions[b])[np.asarray(cache.valid[b])]
        np.testing.assert_array_equal(valid_positions, np.arange(len(prompt) + n))
    assert int(out.lengths[1]) == 2 and bool(out.stopped[1])


@pytest.mark.parametrize("sampled", [False, True])
def test_continuing_from_the_returned_state_equals_one_call(tiny_lm, greedy, sampled):
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    kw = dict(temperature=0.8, top_k=8) if sampled else {}
    stop = (_stop_token(greedy),)
    one = generate(graphdef, params, tokens, mask, jax.random.key(5),
                   SamplingConfig(max_new_tokens=8, stop_tokens=stop, **kw))
    first = generate(graphdef, params, tokens, mask, jax.random.key(5),
                     SamplingConfig(max_new_tokens=3, stop_tokens=stop, **kw), cache_size=8 + 8)
    rest = continue_decoding(graphdef, params, first.state, jax.random.key(5),
                             SamplingConfig(max_new_tokens=5, stop_tokens=stop, **kw))
    for field in ("tokens", "logprobs", "sample_logprobs", "mask"):
        joined = np.concatenate([np.asarray(getattr(first, field)), np.asarray(getattr(rest, field))], axis=1)
        np.testing.assert_allclose(joined, np.asarray(getattr(one, field)), atol=1e-6, err_msg=field)
    if not sampled:  # row 1 stops at step 1: the continuation had to keep it stopped
        assert int(one.lengths[1]) == 2


def test_append_a_turn_equals_prefilling_the_whole_conversation(tiny_lm, greedy):
    """Generate, append a new user turn of a different length per row, generate again: the second answer
    equals a fresh generation from the whole conversation as one prompt (positions across cache gaps)."""
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    sampling = SamplingConfig(max_new_tokens=4, stop_tokens=(_stop_token(greedy),))
    first = generate(graphdef, params, tokens, mask, jax.random.key(0), sampling, cache_size=8 + 4 + 4 + 4)
    turns = [[11, 12], [13], [14, 15, 16]]
    t_tok, t_mask = pad_prompts(turns, bucket=4)
    second_state = append_tokens(graphdef, params, first.state, t_tok, t_mask)
    second = continue_decoding(graphdef, params, second_state, jax.random.key(0), sampling)
    whole = [p + np.asarray(first.tokens[b])[np.asarray(first.mask[b])].tolist() + turns[b]
             for b, p in enumerate(PROMPTS)]
    w_tok, w_mask = pad_prompts(whole, bucket=8)
    fresh = generate(graphdef, params, w_tok, w_mask, jax.random.key(0), sampling)
    np.testing.assert_array_equal(np.asarray(second.tokens), np.asarray(fresh.tokens))
    np.testing.assert_allclose(np.asarray(second.logprobs), np.asarray(fresh.logprobs), atol=1e-5)


def test_stop_sequences_and_min_new_tokens(tiny_lm, greedy):
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    g = np.asarray(greedy.tokens)
    seq = (int(g[0, 2]), int(g[0, 3]))  # row 0 generates it at steps 2-3
    out = generate(graphdef, params, tokens, mask, jax.random.key(0),
                   SamplingConfig(max_new_tokens=N, stop_sequences=(seq,)))
    assert int(out.lengths[0]) <= 4 and bool(out.stopped[0])
    n0 = int(out.lengths[0])
    assert tuple(np.asarray(out.tokens[0, n0 - 2:n0])) == seq
    for b in range(3):  # every row stops at the first completion of the sequence, or runs to N
        row = g[b].tolist()
        first_end = next((i + 2 for i in range(N - 1) if tuple(row[i:i + 2]) == seq), N)
        assert int(out.lengths[b]) == first_end
    # min_new_tokens: the stop token cannot be sampled before step 3
    stop = _stop_token(greedy)
    held = generate(graphdef, params, tokens, mask, jax.random.key(0),
                    SamplingConfig(max_new_tokens=N, stop_tokens=(stop,), min_new_tokens=3))
    assert (np.asarray(held.tokens[:, :3]) != stop).all() and (np.asarray(held.lengths) >= 3).all()


def test_early_exit_once_every_row_has_stopped(tiny_lm, greedy):
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    first = tuple(int(t) for t in np.asarray(greedy.tokens[:, 0]))
    out = generate(graphdef, params, tokens, mask, jax.random.key(0),
                   SamplingConfig(max_new_tokens=30, stop_tokens=first))
    assert int(out.state.step) == 1 and int(out.cache.index) == 8 + 1  # one step ran, not 30
    assert (np.asarray(out.lengths) == 1).all()


def test_sampled_and_raw_logprobs(tiny_lm):
    """logprobs are log_softmax of the raw logits; sample_logprobs of the processed (temperature, top-k)
    logits, both checked against a teacher-forced forward of the generated sequence."""
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    out = generate(graphdef, params, tokens, mask, jax.random.key(9),
                   SamplingConfig(max_new_tokens=N, temperature=0.7, top_k=5))
    for b, prompt in enumerate(PROMPTS):
        seq = jnp.asarray([prompt + np.asarray(out.tokens[b]).tolist()])
        logits = apply(params, seq).logits[0, len(prompt) - 1:len(prompt) - 1 + N]
        tok = np.asarray(out.tokens[b])
        raw = np.asarray(jax.nn.log_softmax(logits))[np.arange(N), tok]
        proc = np.asarray(jax.nn.log_softmax(process_logits(logits, temperature=0.7, top_k=5)))[np.arange(N), tok]
        np.testing.assert_allclose(np.asarray(out.logprobs[b]), raw, atol=1e-5)
        np.testing.assert_allclose(np.asarray(out.sample_logprobs[b]), proc, atol=1e-5)
        assert not np.allclose(proc, raw, atol=1e-3)  # the two log-probs are different quantities
    assert (np.asarray(generate(graphdef, params, tokens, mask, jax.random.key(0),
                                SamplingConfig(max_new_tokens=2)).sample_logprobs) == 0).all()


def test_generation_from_inputs_embeds_equals_tokens(tiny_lm, greedy):
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    embeds = model_lib.embed(graphdef, params, tokens)
    out = generate(graphdef, params, None, mask, jax.random.key(0), SamplingConfig(max_new_tokens=N),
                   inputs_embeds=embeds)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(greedy.tokens))


def test_continuation_errors(tiny_lm, greedy):
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    out = generate(graphdef, params, tokens, mask, jax.random.key(0), SamplingConfig(max_new_tokens=2))
    with pytest.raises(ValueError, match="free slots"):
        continue_decoding(graphdef, params, out.state, jax.random.key(0), SamplingConfig(max_new_tokens=3))
    grown = extend_cache(out.state, 3)
    assert grown.cache.size == out.cache.size + 3
    more = continue_decoding(graphdef, params, grown, jax.random.key(0), SamplingConfig(max_new_tokens=3))
    np.testing.assert_array_equal(np.asarray(more.tokens), np.asarray(greedy.tokens[:, 2:5]))
    with pytest.raises(ValueError, match="expected the same"):
        append_tokens(graphdef, params, out.state, tokens[:2], mask[:2])
    with pytest.raises(ValueError, match="stop_sequences"):
        SamplingConfig(stop_sequences=((),))
    with pytest.raises(ValueError, match="cache k"):
        model_lib.apply(graphdef, params, tokens[:, :1], cache=model_lib.init_cache(config, 2, 8))


def test_generation_with_unmerged_lora_equals_the_merged_model(tiny_lm):
    from core.lm import lora as lora_lib

    config, graphdef, params, apply = tiny_lm
    cfg = lora_lib.LoraConfig(rank=2, alpha=4.0, targets=("q_proj", "v_proj", "down_proj"))
    adapters = lora_lib.init_lora(config, cfg, jax.random.key(1))
    adapters = jax.tree.map(lambda x: x + 0.3 * jax.random.normal(jax.random.key(2), x.shape), adapters)
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    sampling = SamplingConfig(max_new_tokens=N)
    merged = generate(graphdef, lora_lib.merge(params, adapters, cfg), tokens, mask, jax.random.key(0), sampling)
    unmerged = generate(graphdef, params, tokens, mask, jax.random.key(0), sampling,
                        lora=lora_lib.LoraInputs(adapters=adapters, config=cfg))
    plain = generate(graphdef, params, tokens, mask, jax.random.key(0), sampling)
    np.testing.assert_array_equal(np.asarray(unmerged.tokens), np.asarray(merged.tokens))
    np.testing.assert_allclose(np.asarray(unmerged.logprobs), np.asarray(merged.logprobs), atol=1e-5)
    assert not np.allclose(np.asarray(unmerged.logprobs), np.asarray(plain.logprobs), atol=1e-3)


def test_noise_drawn_before_the_loop_samples_the_tokens_drawn_inside_it(tiny_lm, monkeypatch):
    """Small decodes draw every step's Gumbel noise before the loop; the tokens and log-probs are exactly
    those of drawing it step by step (the contract: step s samples with fold_in(key, s))."""
    import importlib

    generate_lib = importlib.import_module("core.lm.generate")  # the package re-exports a function of that name
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    sampling = SamplingConfig(max_new_tokens=6, temperature=1.3, top_k=7)

    def run():
        logits, cache = generate_lib.prefill(graphdef, params, jnp.asarray(tokens), jnp.asarray(mask), cache_size=14)
        state = generate_lib.start_state(cache, logits)._replace(step=jnp.asarray(3, jnp.int32))  # a continuation
        return jax.jit(lambda p, st: generate_lib.decode(graphdef, p, st, jax.random.key(11), sampling))(params, state)

    assert 6 * len(PROMPTS) * config.vocab_size <= generate_lib.PRECOMPUTED_NOISE_MAX
    before = run()
    monkeypatch.setattr(generate_lib, "PRECOMPUTED_NOISE_MAX", 0)
    inside = run()
    for field in ("tokens", "logprobs", "sample_logprobs", "mask"):
        np.testing.assert_array_equal(np.asarray(getattr(before, field)), np.asarray(getattr(inside, field)), field)
    assert len(np.unique(np.asarray(before.tokens))) > 3  # sampled, not a constant
    # the contract itself: the first step's token is jax.random.categorical with fold_in(key, step)
    logits, _ = generate_lib.prefill(graphdef, params, jnp.asarray(tokens), jnp.asarray(mask), cache_size=14)
    processed = process_logits(logits, temperature=1.3, top_k=7)
    first = jax.random.categorical(jax.random.fold_in(jax.random.key(11), 3), processed, axis=-1)
    np.testing.assert_array_equal(np.asarray(before.tokens)[:, 0], np.asarray(first))


def test_a_head_of_the_wrong_shape_is_one_clear_error(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    with pytest.raises(ValueError, match=r"unembedding shape \(3, 4\): expected \(hidden_size, vocab_size\)"):
        model_lib.apply(graphdef, params, jnp.asarray([[1, 2]]), unembedding=jnp.zeros((3, 4)))


def test_argmax_last_is_jnp_argmax():
    """Ties (the first wins), -inf rows, NaNs (the first NaN wins, as jnp.argmax) and random rows."""
    import importlib

    argmax_last = importlib.import_module("core.lm.generate").argmax_last
    x = np.random.default_rng(0).standard_normal((64, 37)).astype(np.float32)
    x[0, [3, 9]] = 10.0
    x[1] = -np.inf
    x[2, [5, 20]] = np.nan
    x[3, 7:] = x[3, :30].max() + 1.0
    got, want = np.asarray(argmax_last(jnp.asarray(x))), np.asarray(jnp.argmax(jnp.asarray(x), axis=-1))
    np.testing.assert_array_equal(got, want)
    assert got[:4].tolist() == [3, 0, 5, 7]


def test_the_row_major_head_is_made_once_per_embedding_and_dropped_with_it():
    import gc
    import importlib

    gen = importlib.import_module("core.lm.generate")
    embedding = jnp.arange(12.0).reshape(4, 3)
    head = gen.row_major_head(embedding)
    np.testing.assert_array_equal(np.asarray(head), np.asarray(embedding).T)
    assert gen.row_major_head(embedding) is head  # the second call reuses the copy
    other = embedding + 1.0  # new weights (an update): a new copy
    assert gen.row_major_head(other) is not head
    np.testing.assert_array_equal(np.asarray(gen.row_major_head(other)), np.asarray(other).T)
    key = id(embedding)
    assert key in gen._ROW_MAJOR_HEADS
    del embedding, head
    gc.collect()
    assert key not in gen._ROW_MAJOR_HEADS  # no copy outlives its weights
    traced = jax.jit(lambda e: gen.row_major_head(e))(other)  # under a trace: transposed, nothing kept
    np.testing.assert_array_equal(np.asarray(traced), np.asarray(other).T)
    assert len([k for k, (ref, _) in gen._ROW_MAJOR_HEADS.items() if ref() is None]) == 0
