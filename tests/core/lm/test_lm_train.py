"""Synthetic tasks, packing, the masked next-token loss, and a smoke run of the tiny_lm experiment."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.lm import EXPERIMENT, losses
from core.lm import data as lm_data
from core.lm import model as model_lib
from core.lm.configs import LMConfig, TinyLMConfig


def test_tasks_and_packing():
    rng = np.random.default_rng(0)
    ex = lm_data.make_examples("reverse", 5, num_symbols=4, min_len=2, max_len=3, rng=rng)
    for prompt, answer in ex:
        assert prompt[0] == lm_data.BOS and prompt[-1] == lm_data.SEP and answer[-1] == lm_data.EOS
        assert answer[:-1] == prompt[1:-1][::-1]
    kv = lm_data.make_examples("kv_recall", 5, num_symbols=4, min_len=3, max_len=3, rng=rng)
    for prompt, answer in kv:
        body, q = prompt[1:-2], prompt[-1]
        assert dict(zip(body[::2], body[1::2]))[q] == answer[0]
    packed = lm_data.pack(ex, seq_len=16)
    n_tokens = sum(len(p) + len(a) - 1 for p, a in ex)
    assert (packed["segment_ids"] > 0).sum() == n_tokens
    assert packed["loss_mask"].sum() == sum(len(a) for _, a in ex)
    r0 = packed["segment_ids"][0]
    first = r0 == 1
    np.testing.assert_array_equal(packed["inputs"][0][first], (ex[0][0] + ex[0][1])[:-1])
    np.testing.assert_array_equal(packed["targets"][0][first], (ex[0][0] + ex[0][1])[1:])
    with pytest.raises(ValueError, match="seq_len"):
        lm_data.pack(ex, seq_len=4)


def test_packed_forward_equals_separate_forwards():
    config = LMConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
                      num_kv_heads=1, head_dim=8)
    graphdef, params = model_lib.init(config, jax.random.key(0))
    a, b = [1, 5, 6, 2], [1, 7, 8, 9, 2]
    packed = jnp.asarray([a + b + [0]])
    seg = jnp.asarray([[1] * 4 + [2] * 5 + [0]])
    apply = jax.jit(model_lib.apply, static_argnums=0)
    out = apply(graphdef, params, packed, segment_ids=seg, attention_mask=seg > 0).logits
    both = apply(graphdef, params, jnp.asarray([a + [0], b])).logits  # right padding: causal, so harmless
    la, lb = both[:1, :4], both[1:]
    np.testing.assert_allclose(out[0, :4], la[0], atol=1e-5)
    np.testing.assert_allclose(out[0, 4:9], lb[0], atol=1e-5)
    # the masked loss only counts answer tokens: targets elsewhere are irrelevant
    batch = {"inputs": packed, "segment_ids": seg, "targets": jnp.zeros_like(packed),
             "loss_mask": jnp.zeros(packed.shape).at[0, 2].set(1.0)}
    loss_fn = jax.jit(losses.next_token_loss(graphdef))
    loss, metrics = loss_fn(params, batch, None)
    np.testing.assert_allclose(loss, -jax.nn.log_softmax(la[0, 2])[0], rtol=1e-5)
    batch2 = {**batch, "targets": batch["targets"].at[0, 5].set(3)}
    np.testing.assert_allclose(loss_fn(params, batch2, None)[0], loss, rtol=1e-6)


def test_tiny_preset_smoke(tmp_path):
    config = EXPERIMENT.config("tiny")
    assert isinstance(config, TinyLMConfig) and EXPERIMENT.name == "tiny_lm"
    metrics = EXPERIMENT.run(config, tmp_path)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert set(saved) >= {"exact_match", "token_acc", "gen_exact_match", "final_loss"}
    assert (tmp_path / "loss.png").exists() and (tmp_path / "accuracy.png").exists()
    log = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses_ = [r["loss"] for r in log if "loss" in r]
    assert losses_[-1] < losses_[0]  # it learns something in 20 steps
    assert 0.0 <= metrics["gen_exact_match"] <= 1.0


def test_config_errors():
    with pytest.raises(ValueError, match="task"):
        TinyLMConfig(task="copy")
    from core.lm.train import make_datasets

    with pytest.raises(ValueError, match="vocab_size=16: expected >= 20"):
        make_datasets(TinyLMConfig(task="kv_recall"))
