"""BIT end to end, the training: the tiny run through the CLI entry point (files, metrics, decoded sentences), a
rerun that retrains only the removed end-to-end stage and ends where the first run ended, a sharded step on 8
fake devices, the LM frozen and only the adapters' targets trained, and the missing-LM error."""

import dataclasses
import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_trees_close

from bit import train as cascade_train
from bit.e2e import configs
from bit.e2e import train as e2e_train
from bit.e2e.losses import make_e2e_loss
from core import train as core_train
from core.config import ConfigError
from core.lm import lora as lora_lib
from core.sharding import batch_sharding, make_mesh, replicate, replicated, shard_batch


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, module_compile_cache):
    """One tiny run; the rerun below loads the programs it compiled from the module's compile cache."""
    workdir = tmp_path_factory.mktemp("bit_e2e_tiny")
    return workdir, e2e_train.run(configs.tiny(), workdir)


def test_tiny_run_writes_metrics_plots_and_sentences(tiny_run):
    workdir, metrics = tiny_run
    saved = json.loads((workdir / "metrics.json").read_text())
    for name in ("losses.png", "wer.png", "decoded.json", "lm/tokenizer.json"):
        assert (workdir / name).stat().st_size > 0, name
    for stage in ("lm/lm_text", "lm/lm_speech", "encoder_ssl", "encoder_ctc", "e2e"):
        assert (workdir / stage / "metrics.jsonl").exists(), stage
    for key in ("wer_greedy", "wer_beam", "wer_beam_oracle", "cascade_wer_cascade", "latency_e2e_greedy_s",
                "latency_e2e_beam_s", "latency_cascade_s"):
        assert np.isfinite(saved[key]) and saved[key] >= 0, key
    assert saved["wer_beam_oracle"] <= saved["wer_beam"] + 1e-9  # the oracle picks from a list holding the first
    assert saved["labelled"] == 16 and len(saved["examples"]) == 2
    assert all(len(ex["beam_nbest"]) == configs.tiny().decode.n_best for ex in saved["examples"])
    assert np.isfinite(metrics["e2e_final_ce"]) and np.isfinite(metrics["e2e_final_info_nce"])


def test_rerun_retrains_only_the_missing_stage_and_ends_the_same(tiny_run, tmp_path):
    workdir, first = tiny_run
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy)
    shutil.rmtree(copy / "e2e")
    def checkpoints():
        return sorted((p.name, p.stat().st_mtime_ns) for p in (copy / "encoder_ctc" / "checkpoints").iterdir())

    stamp = checkpoints()
    again = e2e_train.run(configs.tiny(), copy)
    assert checkpoints() == stamp  # the earlier stages are restored, not retrained
    assert (copy / "e2e" / "checkpoints").exists()
    for key in ("wer_greedy", "wer_beam", "e2e_final_ce", "e2e_final_info_nce", "cascade_wer_cascade"):
        assert again[key] == first[key], key
    assert again["examples"] == first["examples"]


@pytest.fixture(scope="module")
def small_setup(tmp_path_factory):
    """A tiny LM, an encoder and one batch of rows, without training."""
    config = configs.tiny()
    workdir = tmp_path_factory.mktemp("bit_e2e_parts")
    data = cascade_train.build_data(config.base, workdir)
    no_lm = dataclasses.replace(config, lm=dataclasses.replace(config.lm, text_steps=1, speech_steps=0, kind="text"))
    lm = e2e_train.language_model(no_lm, data["lm_text"], workdir / "lm", seed=0, progress_bar=False)
    graphdef, params = cascade_train.init_model(config.base, data["num_sessions"], jax.random.key(1))
    encoder = e2e_train.NeuralEncoder(graphdef, params, {})
    layout, bridge = e2e_train.layout_for(config, lm, config.base.model.d_model, jax.random.key(2))
    texts = data["train_text"][:8]
    rows = e2e_train.e2e_rows(config, lm, data["train"], texts, 32)
    return config, lm, encoder, layout, bridge, {k: jnp.asarray(v) for k, v in rows.items()}


def test_sharded_e2e_step_equals_one_device(small_setup, devices):
    config, lm, encoder, layout, bridge, batch = small_setup
    config = dataclasses.replace(config, e2e=dataclasses.replace(config.e2e, lora_dropout=0.0),
                                 base=dataclasses.replace(config.base, model=dataclasses.replace(
                                     config.base.model, dropout=0.0)))
    adapters = lora_lib.init_lora(lm.config, e2e_train.lora_config(config), jax.random.key(3))
    params = {"bridge": bridge, "lora": adapters, "encoder": encoder.params}
    tx = optax.adamw(1e-3)
    loss_fn = make_e2e_loss(layout, encoder.graphdef, config)
    state = core_train.init_train_state(params, tx, jax.random.key(4), frozen={"lm": lm.params})
    single, m1 = core_train.make_train_step(loss_fn, tx, donate=False)(state, batch)
    mesh = make_mesh(data=8)
    step = core_train.make_train_step(loss_fn, tx, donate=False, state_sharding=replicated(mesh),
                                      batch_sharding=batch_sharding(mesh))
    sharded, m8 = step(replicate(state, mesh), shard_batch(batch, mesh))
    assert len(jax.tree.leaves(sharded.params)[0].sharding.device_set) == 8
    np.testing.assert_allclose(float(m8["loss"]), float(m1["loss"]), rtol=1e-5)
    assert_trees_close(jax.device_get(sharded.params), jax.device_get(single.params), atol=1e-5, rtol=1e-5)
    assert float(m1["info_nce"]) > 0 and float(m1["ce"]) > 0


def test_a_step_trains_adapters_bridge_and_encoder_never_the_lm(small_setup):
    config, lm, encoder, layout, bridge, batch = small_setup
    adapters = lora_lib.init_lora(lm.config, e2e_train.lora_config(config), jax.random.key(3))
    params = {"bridge": bridge, "lora": adapters, "encoder": encoder.params}
    tx = optax.sgd(0.1)
    state = core_train.init_train_state(params, tx, jax.random.key(4), frozen={"lm": lm.params})
    before = jax.device_get(state)
    new, _ = core_train.make_train_step(make_e2e_loss(layout, encoder.graphdef, config), tx, donate=False)(
        state, batch)
    assert_trees_close(jax.device_get(new.frozen), before.frozen, exact=True)
    for part in ("bridge", "lora", "encoder"):
        moved = [not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(jax.device_get(new.params[part])),
                                                          jax.tree.leaves(before.params[part]))]
        assert any(moved), part
    # LoRA B starts at 0: after one step B moves; every adapted projection is one of the configured targets
    assert set(new.params["lora"][0]) == set(config.e2e.lora_targets)


def test_no_lm_and_no_steps_is_one_clear_error(tmp_path):
    config = configs.tiny()
    config = dataclasses.replace(config, lm=dataclasses.replace(config.lm, text_steps=0, speech_steps=0))
    with pytest.raises(ConfigError, match="lm.path"):
        e2e_train.language_model(config, ["we see the dog"], tmp_path, seed=0)


def test_a_local_hf_folder_is_the_language_model(small_setup, tmp_path):
    """The paper preset's path: `lm.path` names a HuggingFace folder (config.json, safetensors, tokenizer.json);
    its weights and tokenizer are used as they are, and a tag it lacks is spelled in ordinary tokens."""
    from core.lm.weights import save_hf

    config, lm, encoder, _, _, _ = small_setup
    folder = tmp_path / "hf"
    save_hf(folder, lm.config, lm.params)
    lm.tokenizer.save(folder)
    loaded = e2e_train.language_model(dataclasses.replace(config, lm=dataclasses.replace(config.lm, path=str(folder))),
                                      ["unused"], tmp_path / "run", seed=0)
    assert loaded.records == {} and loaded.config.vocab_size == lm.config.vocab_size
    assert_trees_close(jax.device_get(loaded.params), jax.device_get(lm.params), exact=True)
    layout, _ = e2e_train.layout_for(config, loaded, config.base.model.d_model, jax.random.key(0))
    assert layout.open_ids.tolist() == [loaded.tokenizer.token_to_id("<neural>")]
    from bit.e2e import data as data_lib
    from core.lm.tokenizer import train_bpe
    without_tags = train_bpe(["we see the dog"] * 4, vocab_size=300)  # default specials: no <neural> tags
    open_ids, close_ids = data_lib.delimiter_ids(without_tags, "neural")
    assert len(open_ids) > 1 and without_tags.decode(open_ids) == "<neural>"
    assert without_tags.decode(close_ids) == "</neural>"
