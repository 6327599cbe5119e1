"""The real run on the tiny preset, the requirement tagger, a sharded step on 8 fake devices, config errors."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from core.config import ConfigError, apply_overrides
from core.lm import data as lm_data
from core.lm import losses
from core.lm import model as model_lib
from core.sharding import make_mesh, replicate, shard_batch
from core.train import init_train_state, make_train_step
from generative.cad import EXPERIMENT, corpus, data, model, tokens, train
from generative.cad.configs import CADConfig, presets

pytest.importorskip("manifold3d")


def test_tiny_run_writes_metrics_renders_and_rows(tmp_path):
    cfg = dataclasses.replace(presets()["tiny"], arms=("direct", "pta", "pta_no_copy", "pta_gold_plan"))
    metrics = EXPERIMENT.run(cfg, tmp_path)
    assert json.loads((tmp_path / "metrics.json").read_text()) == pytest.approx(metrics, nan_ok=True)
    rows = json.loads((tmp_path / "eval.json").read_text())["rows"]
    assert {(r["arm"], r["level"]) for r in rows} == {(a, lv) for a in cfg.arms for lv in range(4)}
    for r in rows:
        assert 0 <= r["invalid_ratio"] <= 1 and r["n"] == cfg.n_test
        assert r["requirements_stated"] == 0 if r["level"] == 0 else r["requirements_stated"] > 0
    assert all("plan_exact" in r and "memory_exact" in r for r in rows if r["arm"] in ("pta", "pta_no_copy"))
    assert all("memory_exact" in r and "plan_exact" not in r for r in rows if r["arm"] == "pta_gold_plan")
    for name in ("renders.png", "levels.png", "loss_direct.png", "parts/part0_gt.stl"):
        assert (tmp_path / name).stat().st_size > 1000


def test_tagger_learns_the_requirement_roles():
    parts = corpus.make_corpus(300, 0)
    arrays = data.tagger_arrays(parts, train.TAGGER_LENGTH)
    graphdef, params, losses_ = model.train_tagger(arrays, vocab=tokens.VOCAB, steps=300, batch_size=128, lr=3e-3,
                                                   key=jax.random.key(0))
    assert float(losses_[-1]) < 0.1 * float(losses_[0])
    test = corpus.make_corpus(50, 1)
    texts = [data.text_words(p, 3) for p in test]
    tags = train.tag_texts((graphdef, params), texts)
    exact = np.mean([data.memory_words(w, t) == data.gold_memory(p, 3) for w, t, p in zip(texts, tags, test)])
    assert exact > 0.9  # roles are named right before their numbers: a 3-word window suffices


def test_memory_words_in_the_command_frame():
    part = next(p for p in corpus.make_corpus(50, 0) if "hole_x" in p.spec[0])
    mem = data.gold_memory(part, 3)
    i = mem.index("role:hole_x")
    assert mem[i + 1] == f"v{128 + part.spec[0]['hole_x']}"
    assert data.gold_memory(part, 0) == []


def test_sharded_step_equals_single_device():
    cfg = presets()["tiny"]
    rows = lm_data.pack(data.examples(corpus.make_corpus(16, 0), "actioner"), cfg.seq_len)
    batch = {k: v[:8] for k, v in rows.items()}
    graphdef, params = model_lib.init(cfg.model, jax.random.key(0))
    import optax
    tx = optax.sgd(0.1)
    step = make_train_step(losses.next_token_loss(graphdef), tx, donate=False)
    state = init_train_state(params, tx, jax.random.key(1))
    single, m1 = step(state, batch)
    mesh = make_mesh(data=8)
    sharded, m8 = step(replicate(state, mesh), shard_batch(batch, mesh))
    assert len(jax.tree.leaves(sharded.params)[0].sharding.device_set) == 8
    np.testing.assert_allclose(float(m8["loss"]), float(m1["loss"]), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(single.params), jax.tree.leaves(sharded.params)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("override, match", [
    ("arms=('direct','oracle')", "arms"),
    ("seq_len=100", "seq_len"),
    ("max_extrusions=5", "max_extrusions"),
    ("planner_steps=0", "planner_steps"),
])
def test_bad_config_values(override, match):
    with pytest.raises(ConfigError, match=match):
        apply_overrides(presets()["tiny"], [override])


def test_equal_compute_default():
    cfg = CADConfig(planner_steps=10, actioner_steps=30)
    assert cfg.total_direct_steps == 40
