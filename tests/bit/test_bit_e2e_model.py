"""BIT end to end, the parts: InfoNCE against a hand-computed batch, the projector shapes, the row layout against
plain token ids, LoRA reaching only its targets with the LM frozen, simulated speech frames, bad input."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bit.e2e import configs
from bit.e2e import data as data_lib
from bit.e2e.losses import Layout, target_logprobs
from bit.e2e.model import Bridge, Projector, assemble, info_nce, patch_mask, pooled
from core.config import BadInputError, ConfigError, apply_overrides
from core.lm import lora as lora_lib
from core.lm import model as lm_model
from core.lm.configs import LMConfig

LM = LMConfig(architecture="qwen2", vocab_size=24, hidden_size=16, intermediate_size=32, num_layers=2, num_heads=2,
              num_kv_heads=1, head_dim=8, tie_word_embeddings=True)


def _log_softmax(x, axis):
    x = x - x.max(axis=axis, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=axis, keepdims=True))


def test_info_nce_matches_hand_computation():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    loss, acc = info_nce(jnp.asarray(a), jnp.asarray(b), jnp.log(jnp.asarray(10.0)), 100.0)
    an = a / np.linalg.norm(a, axis=1, keepdims=True)
    bn = b / np.linalg.norm(b, axis=1, keepdims=True)
    logits = 10.0 * an @ bn.T
    expected = -np.mean(np.diag(_log_softmax(logits, 1))) - np.mean(np.diag(_log_softmax(logits, 0)))
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    np.testing.assert_allclose(float(acc), np.mean(logits.argmax(1) == np.arange(3)), rtol=1e-6)
    # the logit scale is capped: log scale 10 (scale e^10) gives the loss at scale 100
    capped, _ = info_nce(jnp.asarray(a), jnp.asarray(b), jnp.asarray(10.0), 100.0)
    logits = 100.0 * an @ bn.T
    expected = -np.mean(np.diag(_log_softmax(logits, 1))) - np.mean(np.diag(_log_softmax(logits, 0)))
    np.testing.assert_allclose(float(capped), expected, rtol=1e-5)
    # aligned pairs at a high scale: loss near 0 and every row retrieved
    loss, acc = info_nce(jnp.eye(3), jnp.eye(3), jnp.log(jnp.asarray(100.0)), 100.0)
    assert float(loss) < 1e-3 and float(acc) == 1.0


@pytest.mark.parametrize("kind,layers", [("linear", 1), ("mlp", 2)])
def test_projector_shapes(kind, layers):
    proj = Projector(6, 16, kind, rngs=nnx.Rngs(0))
    x = jnp.ones((2, 5, 6))
    assert proj(x).shape == (2, 5, 16)
    assert len(jax.tree.leaves(nnx.state(proj, nnx.Param))) == 2 * layers  # kernels and biases
    if kind == "mlp":  # Linear -> ReLU -> Linear
        h = proj.fc1(x)
        np.testing.assert_allclose(np.asarray(proj(x)), np.asarray(proj.fc2(jax.nn.relu(h))), rtol=1e-6)


def test_pooling_and_patch_mask():
    x = jnp.asarray([[[1.0], [3.0], [100.0]]])
    np.testing.assert_allclose(np.asarray(pooled(x, jnp.asarray([[True, True, False]]))), [[2.0]])
    np.testing.assert_array_equal(np.asarray(patch_mask(jnp.asarray([11, 5]), 4, 5)),
                                  [[True, True, True, False], [True, False, False, False]])


@pytest.fixture(scope="module")
def lm():
    graphdef, params = lm_model.init(LM, jax.random.key(0))
    return graphdef, params


def test_assembled_rows_equal_token_ids(lm):
    """A prefix made of token embeddings, with a masked hole, gives the log-probs that the same tokens as ids
    (without the hole) give through the plain forward."""
    graphdef, params = lm
    open_ids, close_ids, prompt = np.asarray([1]), np.asarray([2]), np.asarray([3, 4])
    prefix_ids = jnp.asarray([[5, 9, 6], [7, 9, 8]])
    prefix_mask = jnp.asarray([[True, False, True], [True, True, True]])
    prefix = lm_model.embed(graphdef, params, prefix_ids)
    targets = jnp.asarray([[10, 11, 0], [12, 13, 14]])
    target_mask = jnp.asarray([[True, True, False], [True, True, True]])
    bridge_graphdef = nnx.graphdef(Bridge(4, 16, projector="linear", contrastive_dim=2, temperature=0.1,
                                          rngs=nnx.Rngs(0)))
    layout = Layout(graphdef, bridge_graphdef, open_ids, close_ids, prompt)
    lp = np.asarray(target_logprobs(layout, params, prefix, prefix_mask, targets, target_mask))
    seq = assemble(graphdef, params, prefix, prefix_mask, open_ids, close_ids, prompt, targets, target_mask)
    assert seq.start == 1 + 3 + 1 + 2 and seq.embeds.shape == (2, 10, 16)
    for b, row in enumerate(([1, 5, 6, 2, 3, 4], [1, 7, 9, 8, 2, 3, 4])):
        n = int(target_mask[b].sum())
        ids = jnp.asarray([row + np.asarray(targets[b, :n]).tolist()])
        logp = jax.nn.log_softmax(lm_model.apply(graphdef, params, ids).logits[0], -1)
        ref = [float(logp[len(row) - 1 + t, int(targets[b, t])]) for t in range(n)]
        np.testing.assert_allclose(lp[b, :n], ref, atol=1e-5)


def test_lora_reaches_only_its_targets_and_the_lm_stays_frozen(lm):
    graphdef, params = lm
    cfg = lora_lib.LoraConfig(rank=2, alpha=4.0, targets=("q_proj", "down_proj"))
    adapters = lora_lib.init_lora(LM, cfg, jax.random.key(1))
    adapters = jax.tree.map(lambda x: x + 0.1, adapters)  # B != 0, so dL/dA != 0 too
    bridge_graphdef = nnx.graphdef(Bridge(4, 16, projector="linear", contrastive_dim=2, temperature=0.1,
                                          rngs=nnx.Rngs(0)))
    layout = Layout(graphdef, bridge_graphdef, np.asarray([1]), np.asarray([2]), np.asarray([3]))
    prefix = jnp.ones((2, 3, 16))

    def loss(adapters):
        lp = target_logprobs(layout, params, prefix, jnp.ones((2, 3), bool), jnp.asarray([[5, 6], [7, 8]]),
                             jnp.ones((2, 2), bool), lora_lib.LoraInputs(adapters, cfg))
        return -lp.sum()

    grads = jax.grad(loss)(adapters)
    assert set(grads) == {0, 1} and all(set(grads[i]) == {"q_proj", "down_proj"} for i in grads)
    assert all(float(jnp.abs(x).sum()) > 0 for x in jax.tree.leaves(grads))


def test_speech_frames_average_the_phone_embeddings():
    lm = configs.LanguageModelConfig(speech_dim=3, speech_noise=0.0, speech_jitter=0.0)
    table = data_lib.phone_table(lm)
    ids = np.asarray([5, 7, 40])  # two phones and a silence
    x, n = data_lib.speech_frames(ids, table, np.random.default_rng(0), patch=5, frames=8, phone_bins=4.0,
                                  sil_bins=(2, 2), jitter=0.0, noise=0.0)
    draws = np.random.default_rng(0)  # the same draws: durations (sd 0), silences, then the onset
    draws.normal(np.log(4.0), 0.0, 3)
    draws.integers(2, 3, 3)
    bins = np.concatenate([np.zeros(draws.integers(1, 6), int), np.repeat(ids, [4, 4, 2])])
    assert n == -(-len(bins) // 5) and x.shape == (8, 3)
    padded = np.pad(bins, (0, 5 * n - len(bins)))
    np.testing.assert_allclose(x[:n], table[padded].reshape(n, 5, 3).mean(1), rtol=1e-6)
    assert not x[n:].any()


def test_sentence_too_long_and_bad_config_values():
    tok = data_lib.build_tokenizer(configs.LanguageModelConfig(vocab_size=300), ["we see the dog"] * 4)
    with pytest.raises(BadInputError, match="expected at most 3"):
        data_lib.encode_sentences(tok, ["we see the dog today"], 3)
    ids, mask = data_lib.encode_sentences(tok, ["we see"], 12)
    assert ids[0, int(mask[0].sum()) - 1] == tok.eos_id and tok.decode(ids[0, :int(mask[0].sum()) - 1]) == "we see"
    config = configs.tiny()
    with pytest.raises(ConfigError, match="e2e.projector"):
        apply_overrides(config, ["e2e.projector=conv"])
    with pytest.raises(ConfigError, match="e2e.lora_targets"):
        apply_overrides(config, ["e2e.lora_targets=['embed']"])
    with pytest.raises(ConfigError, match="lm.kind"):
        apply_overrides(config, ["lm.kind=audio"])
    assert dataclasses.replace(config.e2e, contrastive_weight=0.0).contrastive_weight == 0.0


def test_wer_first_and_oracle_and_retrieval_by_hand():
    from bit.e2e.metrics import mean_features, retrieval_accuracy, wer_scores
    refs = ["we see the dog", "my cat"]
    hyps = [["we saw the dog", "we see the dog"], ["my cat today", "cat"]]
    scores = wer_scores(refs, hyps)  # first: 1 sub + 1 ins over 6 words; oracle: 0 + 1 deletion
    assert scores["wer"] == 2 / 6 and scores["wer_oracle"] == 1 / 6
    with pytest.raises(ValueError, match="non-empty"):
        wer_scores(refs, [["x"], []])
    q = np.asarray([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    k = np.asarray([[1.0, 0.1], [1.0, 0.2], [0.9, 1.2]])  # row 1 lands on key 2: 2 of 3 retrieved
    assert retrieval_accuracy(q, k) == pytest.approx(2 / 3)
    x = np.zeros((2, 4, 1))
    x[0, :2, 0] = [1.0, 3.0]
    x[1, :, 0] = 5.0
    np.testing.assert_allclose(mean_features({"x": x, "length": np.asarray([2, 4])}), [[2.0], [5.0]])
