"""The knowledge-split world keeps each model's facts to itself; the baselines' plumbing (the cache-enrichment
oracle, closed gates on the decoding path, the text-to-text hint) and the real training functions run."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.config import ConfigError
from core.lm import model as model_lib
from core.lm.configs import LMConfig
from interp.c2c import communicate as comm
from interp.c2c import data as D
from interp.c2c.configs import C2CConfig, FuserConfig, LMTrainConfig, presets
from interp.c2c.fuser import init_fuser

WORLD = D.make_world(num_recv=6, num_hint=4, num_fuse=8, num_test=6, num_cities=6, num_colours=3, seed=1)


def _facts(examples, world):
    """(entity, city) and (city, colour) token pairs that a text states (in a prompt or an answer)."""
    ents = {world.entity(e) for e in range(world.num_entities)}
    cities = {world.city(c) for c in range(world.num_cities)}
    colours = {world.colour(k) for k in range(world.num_colours)}
    pairs = set()
    for p, a in examples:
        seq = p + a
        for x in seq:
            for y in seq:
                if (x in ents and y in cities) or (x in cities and y in colours):
                    pairs.add((x, y))
    return pairs


def test_the_world_splits_knowledge_between_the_models():
    w = WORLD
    groups = [set(g.tolist()) for g in w.groups.values()]
    assert sum(len(g) for g in groups) == w.num_entities == len(set().union(*groups))
    half = w.num_cities // 2
    assert (w.city_of[w.groups["fuse"]] >= half).all() and (w.city_of[w.groups["test"]] >= half).all()
    rng = np.random.default_rng(0)
    receiver, sharer, fuser = D.receiver_examples(w, rng), D.sharer_examples(w), D.fuser_examples(w)
    test_city_facts = {(w.entity(e), w.city(w.city_of[e])) for e in w.groups["test"]}
    fuse_city_facts = {(w.entity(e), w.city(w.city_of[e])) for e in w.groups["fuse"]}
    hidden_colours = {(w.city(c), w.colour(w.colour_of[c])) for c in range(half, w.num_cities)}
    assert not (_facts(receiver, w) & (test_city_facts | fuse_city_facts))  # the receiver never sees them
    assert test_city_facts <= _facts(sharer, w) and fuse_city_facts <= _facts(sharer, w)
    assert not (_facts(sharer, w) & hidden_colours)  # the sharer never sees C_r's colours
    assert hidden_colours <= _facts(receiver, w)
    test_tokens = {w.entity(e) for e in w.groups["test"]}
    assert not any(t in test_tokens for p, a in fuser for t in p + a)  # the fuser never sees a test entity
    for kind in ("city", "two_hop"):
        for p, a in D.test_examples(w, kind):
            assert p[0] == D.BOS and p[-1] == D.A and a[-1] == D.EOS
    p, a = w.qa("two_hop", int(w.groups["test"][0]))
    assert a[0] == w.colour(w.colour_of[w.city_of[w.groups["test"][0]]])
    assert len(w.hinted_qa("two_hop", 0)[0]) == len(p) + comm.HINT_LENGTH


def test_bad_world_and_config_values_are_one_line_errors():
    with pytest.raises(ConfigError, match="world.num_cities=5: expected an even number"):
        D.make_world(num_recv=1, num_hint=1, num_fuse=1, num_test=1, num_cities=5, num_colours=2, seed=0)
    with pytest.raises(ConfigError, match="fuser.key_frame='pre': expected one of"):
        FuserConfig(key_frame="pre")
    with pytest.raises(ConfigError, match="sharer_path='': expected set together with receiver_path"):
        C2CConfig(receiver_path="/models/x")
    from interp.c2c.train import _check_vocab
    with pytest.raises(ConfigError, match=r"receiver.vocab_size=8: expected >= \d+"):
        _check_vocab(dataclasses.replace(presets()["tiny"], receiver=LMConfig(vocab_size=8)), WORLD)


RECEIVER = LMConfig(architecture="qwen2", vocab_size=WORLD.vocab_size, hidden_size=32, intermediate_size=48,
                    num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, tie_word_embeddings=True)
SHARER = dataclasses.replace(RECEIVER, hidden_size=24, num_layers=2, num_heads=3, num_kv_heads=3, head_dim=8)


def test_cache_enrichment_oracle_keeps_exactly_the_question_slots():
    """With one layer, a slot's K/V depend on its token and position only: dropping the hint's slots and moving
    the question back to positions 0.. must give the plain prompt's logits (1e-5); keeping the hint differs."""
    gd, params = model_lib.init(RECEIVER, jax.random.key(0))
    es = WORLD.groups["test"][:3]
    hinted = jnp.asarray([WORLD.hinted_qa("two_hop", e)[0] for e in es], jnp.int32)
    plain = jnp.asarray([WORLD.qa("two_hop", e)[0] for e in es], jnp.int32)
    got = comm.enriched_logits(RECEIVER, gd, params, hinted)
    want = comm.lm_logits(gd, params, plain, jnp.ones(plain.shape, bool))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    with_hint = comm.lm_logits(gd, params, hinted, jnp.ones(hinted.shape, bool))
    assert float(jnp.abs(with_hint - want).max()) > 1e-4


def _pair(fuser_cfg):
    r_gd, r_params = model_lib.init(RECEIVER, jax.random.key(0))
    s_gd, s_params = model_lib.init(SHARER, jax.random.key(1))
    f_gd, f_params = init_fuser(SHARER, RECEIVER, fuser_cfg, jax.random.key(2))
    pair = comm.Pair(receiver=RECEIVER, receiver_graphdef=r_gd, sharer=SHARER, sharer_graphdef=s_gd, fuser=fuser_cfg,
                     fuser_graphdef=f_gd)
    return pair, f_params, r_params, s_params


@pytest.mark.parametrize("include_response", [False, True])
def test_closed_gates_give_the_receiver_alone_bit_for_bit(include_response):
    cfg = FuserConfig(hidden=16, intermediate=16, include_response=include_response)
    pair, f_params, r_params, s_params = _pair(cfg)
    test = D.test_examples(WORLD, "two_hop")
    tokens, mask = D.left_pad([p for p, _ in test] + [WORLD.qa("city", 0)[0]])  # a padded row too
    alone, _ = comm.c2c_logits(pair, f_params, r_params, s_params, tokens, mask, fuse=False)
    closed, gates = comm.c2c_logits(pair, f_params, r_params, s_params, tokens, mask, closed=True)
    np.testing.assert_array_equal(np.asarray(closed), np.asarray(alone))
    assert float(gates.max()) == 0.0
    assert float(comm.closed_cache_difference(pair, f_params, r_params, s_params, tokens, mask)) == 0.0
    opened, gates = comm.c2c_logits(pair, comm.set_gates(f_params, 1.0), r_params, s_params, tokens, mask)
    assert float(jnp.abs(opened - alone).max()) > 1e-4 and float(gates.min()) == 1.0
    # the cached path is the plain forward (the receiver alone), to float rounding
    plain = comm.lm_logits(pair.receiver_graphdef, r_params, tokens, mask)
    np.testing.assert_allclose(np.asarray(alone), np.asarray(plain), rtol=1e-5, atol=1e-5)


def test_text_to_text_reads_the_sharer_hint():
    pair, _, r_params, s_params = _pair(FuserConfig(hidden=16, intermediate=16))
    test = D.test_examples(WORLD, "city")
    requests = np.asarray([WORLD.statement(int(e))[0] for e in WORLD.groups["test"]], np.int32)
    qt, qm = D.left_pad([p[1:] for p, _ in test])
    logits, hint = comm.t2t_logits(pair, r_params, s_params, requests, qt, qm)
    assert logits.shape == (len(test), RECEIVER.vocab_size) and hint.shape == (len(test), comm.HINT_LENGTH)
    np.testing.assert_array_equal(np.asarray(hint[:, :3]), requests[:, 1:])  # `e lives in`, then the sharer's words


def _greedy_by_full_forwards(graphdef, params, tokens, mask, n):
    """Reference: n greedy tokens, each from a full forward over the whole (left-padded) text so far."""
    out = []
    for _ in range(n):
        tok = jnp.argmax(comm.lm_logits(graphdef, params, tokens, mask), axis=-1).astype(jnp.int32)[:, None]
        out.append(tok)
        tokens, mask = jnp.concatenate([tokens, tok], 1), jnp.concatenate([mask, jnp.ones_like(tok, bool)], 1)
    return jnp.concatenate(out, 1)


def test_timed_generation_paths_write_what_full_forwards_write():
    """The latency programs at set lengths: T2T's answer is the receiver's greedy continuation of
    `request + the sharer's greedy hint + question`; C2C with closed gates writes the receiver alone's answer,
    and with open gates its first token is C2C's next-token choice on the fused cache."""
    pair, f_params, r_params, s_params = _pair(FuserConfig(hidden=16, intermediate=16))
    test = D.test_examples(WORLD, "two_hop")
    requests = np.asarray([WORLD.statement(int(e))[0] for e in WORLD.groups["test"]], np.int32)
    qt, qm = D.left_pad([p[1:] for p, _ in test])
    got = comm.t2t_generate(pair, r_params, s_params, requests, qt, qm, 4, 3)
    hint = _greedy_by_full_forwards(pair.sharer_graphdef, s_params, jnp.asarray(requests),
                                    jnp.ones(requests.shape, bool), 4)
    text = jnp.concatenate([requests, hint, qt], 1)
    text_mask = jnp.concatenate([jnp.ones((len(test), requests.shape[1] + 4), bool), qm], 1)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(
        _greedy_by_full_forwards(pair.receiver_graphdef, r_params, text, text_mask, 3)))
    tokens, mask = D.left_pad([p for p, _ in test])
    alone = _greedy_by_full_forwards(pair.receiver_graphdef, r_params, tokens, mask, 3)
    closed = comm.c2c_generate(pair, comm.close_gates(f_params), r_params, s_params, tokens, mask, 3)
    np.testing.assert_array_equal(np.asarray(closed), np.asarray(alone))
    opened = comm.c2c_generate(pair, comm.set_gates(f_params, 1.0), r_params, s_params, tokens, mask, 3)
    first, _ = comm.c2c_logits(pair, comm.set_gates(f_params, 1.0), r_params, s_params, tokens, mask)
    np.testing.assert_array_equal(np.asarray(opened[:, 0]), np.asarray(jnp.argmax(first, -1)))
    pair_r, *_ = _pair(FuserConfig(hidden=16, intermediate=16, include_response=True))
    with pytest.raises(ValueError, match="include_response"):
        comm.c2c_generate(pair_r, f_params, r_params, s_params, tokens, mask, 3)


@pytest.fixture(scope="module")
def trained_models(module_compile_cache):
    """A few steps of the real LM trainer for both models (shared by the two fuser-training tests)."""
    from interp.c2c.train import train_lm
    cfg = LMTrainConfig(steps=3, batch_size=8, warmup=1)
    r_gd, r_params, r_hist = train_lm(RECEIVER, D.receiver_examples(WORLD, np.random.default_rng(0)), cfg,
                                      jax.random.key(0), desc="receiver", seed=0)
    s_gd, s_params, _ = train_lm(SHARER, D.sharer_examples(WORLD), cfg, jax.random.key(1), desc="sharer", seed=0)
    return r_gd, r_params, r_hist, s_gd, s_params


def test_training_functions_smoke(trained_models):
    """A few steps of the real LM and fuser trainers: finite losses, the fuser moves, the models do not."""
    from interp.c2c.train import train_fuser
    r_gd, r_params, r_hist, s_gd, s_params = trained_models
    assert all(np.isfinite(l) for _, l in r_hist)
    fcfg = FuserConfig(hidden=16, intermediate=16, steps=3, batch_size=8, lr=1e-2, anneal_steps=0)
    f_gd, f0 = init_fuser(SHARER, RECEIVER, fcfg, jax.random.key(5))
    pair = comm.Pair(receiver=RECEIVER, receiver_graphdef=r_gd, sharer=SHARER, sharer_graphdef=s_gd, fuser=fcfg,
                     fuser_graphdef=f_gd)
    before = jax.tree.map(np.asarray, r_params)
    f_params, hist = train_fuser(pair, r_params, s_params, D.fuser_examples(WORLD), jax.random.key(5), seed=0)
    assert len(hist) >= 2 and all(np.isfinite(h[1]) for h in hist)
    assert max(float(jnp.abs(a - b).max()) for a, b in zip(jax.tree.leaves(f_params), jax.tree.leaves(f0))) > 0
    for a, b in zip(jax.tree.leaves(r_params), jax.tree.leaves(before)):
        np.testing.assert_array_equal(np.asarray(a), b)


def test_fuser_training_in_a_run_folder_logs_checkpoints_and_resumes(tmp_path, trained_models):
    """With a workdir the trainers run through core.train.fit (metrics.jsonl, checkpoints) on exactly the batches
    of the plain loop; the fuser's sampler resumes where it stopped; a rerun restores the finished stage."""
    from interp.c2c.train import _FuserLoader, precompute_sections, train_fuser
    r_gd, r_params, _, s_gd, s_params = trained_models
    fcfg = FuserConfig(hidden=16, intermediate=16, steps=3, batch_size=8, lr=1e-2, anneal_steps=0)
    f_gd, _ = init_fuser(SHARER, RECEIVER, fcfg, jax.random.key(5))
    pair = comm.Pair(receiver=RECEIVER, receiver_graphdef=r_gd, sharer=SHARER, sharer_graphdef=s_gd, fuser=fcfg,
                     fuser_graphdef=f_gd)
    examples = D.fuser_examples(WORLD)
    arrays = precompute_sections(pair, r_params, s_params, examples)
    loader = _FuserLoader(arrays, 8, seed=3)
    for _ in range(2):
        next(loader)
    resumed = _FuserLoader(arrays, 8, seed=3)
    resumed.restore(loader.state())
    a, b = next(loader), next(resumed)
    np.testing.assert_array_equal(a.inputs, b.inputs)
    assert int(a.step[0]) == int(b.step[0]) == 2
    plain, _ = train_fuser(pair, r_params, s_params, examples, jax.random.key(5), seed=0)
    logged, hist = train_fuser(pair, r_params, s_params, examples, jax.random.key(5), seed=0, workdir=tmp_path)
    for x, y in zip(jax.tree.leaves(plain), jax.tree.leaves(logged)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
    assert (tmp_path / "metrics.jsonl").read_text().strip() and any((tmp_path / "checkpoints").iterdir())
    assert hist and all(np.isfinite(h[1]) for h in hist)
    again, _ = train_fuser(pair, r_params, s_params, examples, jax.random.key(5), seed=0, workdir=tmp_path)
    for x, y in zip(jax.tree.leaves(again), jax.tree.leaves(logged)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
