"""CTC prefix beam search vs exhaustive search, the Pallas step vs its reference, the phone-LM table, the
modified Kneser-Ney ARPA in KenLM, the lexicon cascade and the error rates."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bit import cascade, metrics, ngram, phonemes
from bit.decode import beam_search, phone_lm_table
from bit.kernels import expand_prune_pallas, expand_prune_reference

V, T, B = 3, 4, 3


def _problem(seed):
    rng = np.random.default_rng(seed)
    logp = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(B, T, V)) * 2, jnp.float32), -1)
    table = jnp.asarray(np.log(rng.dirichlet(np.ones(V + 1), size=(V, V))), jnp.float32)
    return logp, table, jnp.array([4, 3, 2])


_SEQS = [seq for n in range(T + 1) for seq in itertools.product(range(1, V), repeat=n)]


@jax.jit
def _ctc_all(logp, length):
    """ln p_ctc of every label sequence of length <= T (optax.ctc_loss, one batched call)."""
    labels = jnp.array([list(s) + [0] * (T - len(s)) for s in _SEQS], jnp.int32)
    lpad = (jnp.arange(T)[None] >= jnp.array([len(s) for s in _SEQS])[:, None]).astype(jnp.float32)
    pad = jnp.broadcast_to((jnp.arange(T) >= length).astype(jnp.float32), (len(_SEQS), T))
    return -optax.ctc_loss(jnp.broadcast_to(logp, (len(_SEQS), T, V)), pad, labels, lpad)


def _exhaustive(logp, length, table, w, beta):
    """argmax over every label sequence of ln p_ctc + w ln p_lm(y </s>) + beta |y|."""
    ctc = np.asarray(_ctc_all(logp, length))
    table = np.asarray(table)
    best = (-math.inf, None)
    for s, seq in zip(ctc, _SEQS):
        ctx, lm = (0, 0), 0.0
        for tok in (*seq, V):
            lm += float(table[ctx[0], ctx[1], tok])
            ctx = (ctx[1], tok)
        best = max(best, (float(s) + w * lm + beta * len(seq), seq))
    return best


@pytest.mark.parametrize("use_pallas", [False, True])
def test_beam_search_equals_exhaustive(use_pallas):
    for seed, (w, beta) in ((0, (0.0, 0.0)), (1, (0.7, 0.3)), (2, (1.5, -0.5))):
        logp, table, lengths = _problem(seed)
        pre, plen, score = beam_search(logp, lengths, table, beam=32, lm_weight=w, length_bonus=beta, max_len=T,
                                       use_pallas=use_pallas)
        for i in range(B):
            want_score, want_seq = _exhaustive(logp[i], int(lengths[i]), table, w, beta)
            assert tuple(int(x) for x in pre[i, :plen[i]]) == want_seq
            np.testing.assert_allclose(float(score[i]), want_score, rtol=1e-5, atol=1e-5)


def test_pallas_step_equals_reference():
    rng = np.random.default_rng(0)
    b, k, v = 3, 5, 7
    y = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(b, v)), jnp.float32))
    pb = jnp.asarray(np.where(rng.random((b, k)) < 0.2, -np.inf, rng.normal(size=(b, k)) - 3), jnp.float32)
    pnb = jnp.asarray(rng.normal(size=(b, k)) - 3, jnp.float32)
    lm = jnp.asarray(rng.normal(size=(b, k)), jnp.float32)
    plen = jnp.asarray(rng.integers(0, 4, (b, k)), jnp.int32)
    last = jnp.where(plen > 0, jnp.asarray(rng.integers(1, v, (b, k))), -1).astype(jnp.int32)
    lm_next = jnp.asarray(rng.normal(size=(b, k, v)), jnp.float32)
    merge = jnp.asarray(np.where(rng.random((b, k, v)) < 0.1, rng.integers(0, k, (b, k, v)), -1), jnp.int32)
    args = (y, pb, pnb, lm, plen, last, lm_next, merge)
    ref = expand_prune_reference(*args, lm_weight=0.5, length_bonus=0.2)
    pal = expand_prune_pallas(*args, lm_weight=0.5, length_bonus=0.2, interpret=True)
    np.testing.assert_array_equal(np.asarray(ref[0]), np.asarray(pal[0]))
    for r, p in zip(ref[1:], pal[1:]):
        np.testing.assert_allclose(np.asarray(r), np.asarray(p), rtol=1e-6, atol=1e-6)
    with pytest.raises(NotImplementedError, match="Triton lowering does not support"):
        expand_prune_pallas(*args, lm_weight=0.5, length_bonus=0.2, interpret=False)


def test_phone_lm_table_is_normalised():
    table = phone_lm_table()
    assert table.shape == (41, 41, 42)
    probs = np.exp(table[..., 1:]).sum(-1)  # 39 phones + SIL + </s>
    for a, b in [(0, 0), (0, phonemes.PHONE_ID["AH"]), (phonemes.PHONE_ID["K"], phonemes.SIL)]:
        np.testing.assert_allclose(probs[a, b], 1.0, atol=1e-3)


def test_kneser_ney_arpa_loads_in_kenlm_and_sums_to_one(tmp_path):
    import kenlm
    sents = phonemes.generate_sentences(1500, 11)
    model = kenlm.Model(str(ngram.train_arpa(sents, tmp_path / "lm.arpa")))
    vocab = sorted({w for s in sents for w in s.split()}) + ["</s>", "<unk>"]
    rng = np.random.default_rng(0)
    contexts = [[], ["i"], ["zebra", "the"]] + [s.split()[:rng.integers(1, 4)] for s in sents[:5]]
    for ctx in contexts:
        state = kenlm.State()
        model.BeginSentenceWrite(state)
        for w in ctx:
            nxt = kenlm.State()
            model.BaseScore(state, w, nxt)
            state = nxt
        total = sum(10 ** model.BaseScore(state, w, kenlm.State()) for w in vocab)
        assert abs(total - 1.0) < 1e-4, (ctx, total)
    # modified KN beats the uniform distribution on held-out text from the same grammar
    held = phonemes.generate_sentences(50, 12)
    assert np.mean([model.perplexity(s) for s in held]) < len(vocab) / 4


def test_kneser_ney_discounts_hand_checked():
    from collections import Counter
    counts = Counter({("a",): 1, ("b",): 1, ("c",): 2, ("d",): 3, ("e",): 4})  # n1=2 n2=1 n3=1 n4=1
    y = 2 / (2 + 2)
    want = (1 - 2 * y * 1 / 2, 2 - 3 * y * 1 / 1, 3 - 4 * y * 1 / 1)
    np.testing.assert_allclose(ngram._discounts(counts), want)
    with pytest.raises(ValueError, match="order=0"):
        ngram.estimate([["a"]], order=0)


def _clean_emissions(text):
    ids = phonemes.text_to_ids(text)
    lp = np.full((3 * len(ids), 41), -12.0, np.float32)
    for i, c in enumerate(ids):
        lp[3 * i, c] = 0.0
        lp[3 * i + 1:3 * i + 3, 0] = 0.0
    return lp


def test_cascade_decodes_clean_emissions(tmp_path):
    lexicon = cascade.Lexicon(phonemes.vocabulary())
    arpa = ngram.train_arpa(phonemes.generate_sentences(800, 5), tmp_path / "w.arpa")
    dec = cascade.WordDecoder(lexicon, arpa, beam=20)
    for text in phonemes.generate_sentences(3, 99):
        lp = _clean_emissions(text)
        assert dec.decode(lp, len(lp)) == text
        assert cascade.greedy_words(metrics.greedy_ids(lp, len(lp)), lexicon) == text
    # a corrupted word maps to its nearest spelling
    assert cascade.greedy_words([phonemes.PHONE_ID[p] for p in ("W", "AO", "T", "ER", "Z")], lexicon) == "water"


def _noisy_emissions(text, rng, margin=6.0, noise=1.5):
    """4 frames per phone (phone, then 3 blanks): the right class `margin` above the rest, plus Gaussian noise."""
    ids = phonemes.text_to_ids(text)
    x = np.zeros((4 * len(ids), 41), np.float32)
    x[:, 0] = margin
    for i, c in enumerate(ids):
        x[4 * i, c], x[4 * i, 0] = margin, 0.0
    x += rng.normal(size=x.shape).astype(np.float32) * noise
    return x - np.log(np.exp(x).sum(1, keepdims=True))


def test_tune_weights_picks_the_validation_best_and_leaves_the_decoder_set(tmp_path):
    lexicon = cascade.Lexicon(phonemes.vocabulary())
    arpa = ngram.train_arpa(phonemes.generate_sentences(2000, 5), tmp_path / "w.arpa")
    dec = cascade.WordDecoder(lexicon, arpa, beam=50, lm_weight=2.0)
    rng = np.random.default_rng(0)
    texts = phonemes.generate_sentences(12, 99)
    em = [_noisy_emissions(t, rng) for t in texts]
    frames = [len(e) for e in em]
    # greedy phones are ~10 % wrong here; at LM weight 2 the beam loses the truth (most words deleted)
    wer_at_2 = metrics.wer(texts, [dec.decode(e, f) for e, f in zip(em, frames)])
    assert wer_at_2 > 0.5
    got = cascade.tune_weights(dec, em, frames, texts, lm_weights=(0.5, 2.0), word_scores=(0.0,))
    assert {(g["lm_weight"], g["word_score"]) for g in got["grid"]} == {(0.5, 0.0), (2.0, 0.0)}
    assert got["valid_wer"] == min(g["valid_wer"] for g in got["grid"]) < 0.1
    assert (got["lm_weight"], dec.lm_weight, dec.word_score) == (0.5, 0.5, 0.0)
    assert metrics.wer(texts, [dec.decode(e, f) for e, f in zip(em, frames)]) == got["valid_wer"]
    with pytest.raises(ValueError, match="no validation sentences"):
        cascade.tune_weights(dec, [], [], [])


def test_error_rates_hand_checked():
    assert metrics.wer(["the cat sat", "a b"], ["the cat", "a b"]) == pytest.approx(1 / 5)
    assert metrics.per([[1, 2, 3, 40]], [[1, 3, 40]]) == pytest.approx(1 / 4)
    assert metrics.greedy_ids(np.log(np.eye(4)[[1, 1, 0, 1, 2, 2]] + 1e-9), 6) == [1, 1, 2]
    with pytest.raises(ValueError, match="2 references vs 1"):
        metrics.wer(["a", "b"], ["a"])
