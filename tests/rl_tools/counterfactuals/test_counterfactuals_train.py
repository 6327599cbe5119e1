"""The small-model experiment: tiny smoke run, sharded step on 8 fake devices, config errors."""

import json

import jax
import numpy as np
import pytest
from helpers import assert_trees_close

from core import config as config_lib
from core import sharding
from core import train as train_lib
from core.lm import losses
from core.lm import model as model_lib
from rl_tools.counterfactuals import EXPERIMENT as EXPERIMENTS
from rl_tools.counterfactuals import data, generate
from rl_tools.counterfactuals import train as cf_train
from rl_tools.counterfactuals.configs import CFConfig

EXPERIMENT = EXPERIMENTS[0]


def test_tiny_run_writes_metrics_and_plots(tmp_path):
    config = EXPERIMENT.presets["tiny"]
    metrics = EXPERIMENT.run(config, tmp_path)
    for split in cf_train.EVAL_SPLITS:
        for v in cf_train.EVAL_VARIANTS:
            assert 0.0 <= metrics[f"{split}/{v}_em"] <= 1.0
    assert np.isfinite(metrics["final_loss"])
    assert (tmp_path / "iv_vs_cf.png").exists() and (tmp_path / "loss.png").exists()
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["if_else/counterfactual_em"] == metrics["if_else/counterfactual_em"]
    rows = json.loads((tmp_path / "eval.json").read_text())["rows"]
    assert {r["n"] for r in rows} == {config.n_eval}


def test_training_rows_mask_only_answers():
    tok = data.CompactTokenizer()
    items = generate.generate_split("if_else_train", 5, seed=0)[0]
    exs = data.examples(items, ("interventional",), tok)
    rows = data.to_rows(exs, 128)
    assert rows["loss_mask"].sum() == sum(len(a) for _, a in exs)
    prompt, answer = exs[0]
    assert tok.decode(answer) == " ".join(str(v) for v in items[0].answer_iv)
    assert "given" in tok.decode(prompt) and tok.unk_id not in prompt


def test_trace_examples_spell_out_execution():
    from rl_tools.counterfactuals import programs as P
    tok = data.CompactTokenizer()
    items = generate.generate_split("if_else_train", 50, seed=1)[0]
    exs = data.examples(items, ("factual", "interventional"), tok, trace=True)
    assert len(exs) >= 95  # only items whose trace leaves the number range are skipped
    it = items[0]
    ys, pre, out = P.run_trace(it.program, it.x1, it.r_true)
    assert out == P.run(it.program, it.x1, it.r_true) == it.answer_iv[0] and pre % it.program.modulus == out
    words = data.trace_words(it, "interventional")
    assert words == [str(v) for v in (*ys, pre)] + ["=>"]
    with pytest.raises(ValueError, match="counterfactual"):
        data.trace_words(it, "counterfactual")


def test_sharded_step_equals_single_device():
    config = EXPERIMENT.presets["tiny"]
    tok = data.CompactTokenizer()
    items = generate.generate_split("if_else_train", 40, seed=0)[0]
    rows = data.to_rows(data.examples(items, cf_train.TRAIN_VARIANTS, tok), config.seq_len)
    batch = {k: v[:8] for k, v in rows.items()}
    graphdef, params = model_lib.init(config.model, jax.random.key(0))
    tx = cf_train.make_optimizer(config)
    loss_fn = losses.next_token_loss(graphdef)
    state = train_lib.init_train_state(params, tx, jax.random.key(1))
    single, m1 = train_lib.make_train_step(loss_fn, tx, donate=False)(state, batch)
    mesh = sharding.make_mesh()
    assert mesh.shape["data"] == 8
    rep = jax.tree.map(lambda _: sharding.replicated(mesh), state)
    step = train_lib.make_train_step(loss_fn, tx, donate=False, state_sharding=rep,
                                     batch_sharding=sharding.batch_sharding(mesh))
    multi, m8 = step(sharding.replicate(state, mesh), sharding.shard_batch(batch, mesh))
    assert_trees_close(jax.device_get(multi.params), jax.device_get(single.params), atol=1e-5, rtol=1e-5)
    assert float(m8["loss"]) == pytest.approx(float(m1["loss"]), rel=1e-5)


def test_config_errors():
    with pytest.raises(ValueError, match="steps"):
        CFConfig(steps=0)
    with pytest.raises(ValueError, match="max_level"):
        config_lib.apply_overrides(EXPERIMENT.presets["tiny"], ["max_level=5"])
    cfg = config_lib.apply_overrides(EXPERIMENT.presets["tiny"], ["steps=3", "model.num_layers=2"])
    assert cfg.steps == 3 and cfg.model.num_layers == 2
