"""Synthetic data (complex-script shaping, schemas, unequal counts), the tokenizer and batches, a smoke run of
the real experiment, and a sharded training step on 8 fake CPU devices equal to one device."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from PIL import ImageFont, features

from core import sharding
from core.train import init_train_state, make_train_step
from multimodal import vlm
from multimodal.indicvision import EXPERIMENT, data, metrics, synthetic
from multimodal.indicvision import train as ivb_train
from multimodal.indicvision.model import EOS, Tokenizer, training_batch


def _font(script, layout):
    return ImageFont.truetype(str(synthetic.FONT_DIR / f"NotoSans{script}-Regular.ttf"), 32, layout_engine=layout)


def test_indic_text_is_shaped_a_conjunct_is_one_glyph():
    assert features.check("raqm"), "Pillow needs libraqm for Indic shaping"
    shaped, unshaped = _font("Devanagari", ImageFont.Layout.RAQM), _font("Devanagari", ImageFont.Layout.BASIC)
    # क्ष (ka, virama, ssa) is one ligature glyph about as wide as क; laid out code point by code point it is
    # क, a visible virama and ष side by side
    assert shaped.getlength("क्ष") < 1.2 * shaped.getlength("क")
    assert unshaped.getlength("क्ष") > 1.6 * unshaped.getlength("क")
    a = synthetic.render_text("क्ष", "Devanagari", size=48, font_size=24)
    assert (a < 128).any()
    tamil = _font("Tamil", ImageFont.Layout.RAQM)
    # the two-part vowel sign ொ wraps its consonant: its left part as in கெ, its right part as in கா
    wraps = tamil.getlength("கெ") + tamil.getlength("கா") - tamil.getlength("க")
    assert tamil.getlength("கொ") == pytest.approx(wraps, abs=2)


def test_synthetic_rows_follow_the_schemas_with_the_counts_asked():
    rng = np.random.default_rng(0)
    counts = {"Hindi": 5, "Bengali": 2, "Tamil": 1}
    ocr = data.validate("ocr", synthetic.ocr_rows(counts, rng, size=32))
    vqa = data.validate("vqa_indic", synthetic.vqa_rows(counts, rng, size=32))
    mmt = data.validate("mmt", synthetic.mmt_rows(counts, rng, size=32))
    for dataset in (ocr, vqa):
        assert {k: sum(r["language"] == k for r in dataset.rows) for k in counts} == counts
    assert all(set(r["text"]) <= set(synthetic.CONSONANTS[synthetic.SCRIPT_OF[r["language"]]])
               | set("".join(synthetic.VOWEL_SIGNS[synthetic.SCRIPT_OF[r["language"]]]))
               | set(synthetic.VIRAMA.values()) for r in ocr.rows)
    for r in vqa.rows:
        assert r["true_false_a"] in metrics.TRUE_FALSE_WORDS[r["language"]]
        options = [r[f"mcq_opt{k}"] for k in range(1, 5)]
        assert options["ABCD".index(r["mcq_a"])] == r["short_a1"] and len(set(options)) == 4
        assert r["adversarial_answer"].startswith(synthetic.WORDS[r["language"]]["no"])
    for r in mmt.rows:
        filled = [lang for lang in metrics.INDIC_LANGUAGES if r[lang]]
        assert len(filled) == 1 and len(r[filled[0]].split()) == 4


def test_tokenizer_round_trip_and_answer_only_loss_mask():
    tok = Tokenizer.build(["Extract the text", "what colour?"], ["लाल", "நீலம்"])
    assert tok.decode_answer(tok.encode_answer("लाल")) == "लाल"
    assert tok.encode_prompt("Extract unknown")[-1] == 3  # <unk>
    batch = training_batch(tok, np.zeros((2, 8, 8, 3), np.float32), ["Extract the text", "what colour?"],
                           ["लाल", "நீலம்"], length=12)
    prompt0 = len(tok.encode_prompt("Extract the text"))
    np.testing.assert_array_equal(np.flatnonzero(batch["loss_mask"][0]), np.arange(prompt0, prompt0 + 4))
    assert batch["tokens"][0, prompt0 + 3] == EOS and not batch["mask"][0, prompt0 + 4:].any()
    with pytest.raises(ValueError, match="not in the tokenizer's alphabet"):
        tok.encode_answer("abc")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ivb")
    return workdir, EXPERIMENT.run(EXPERIMENT.config("tiny"), workdir)


def test_the_experiment_trains_and_scores_both_models(tiny_run):
    workdir, metrics_out = tiny_run
    assert np.isfinite(metrics_out["final_loss"])
    for model in ("small-vlm", "constant"):
        for language in (*synthetic.SYNTHETIC_LANGUAGES, "overall"):
            assert f"{model}/{language}/ocr_anls_char" in metrics_out
    results = json.loads((workdir / "results.json").read_text())
    assert set(results) == {"small-vlm", "constant"} and set(results["constant"]) == {"ocr", "vqa", "mmt"}
    assert (workdir / "metrics.json").exists() and (workdir / "tokenizer.json").exists()
    assert (workdir / "loss.png").stat().st_size > 1000 and (workdir / "ocr_anls_char.png").stat().st_size > 1000


def test_a_sharded_step_on_8_devices_equals_one_device(devices):
    config = EXPERIMENT.config("tiny")
    data_ = ivb_train.make_data(config)
    examples = ivb_train.examples(data_.train)[:8]
    tok = ivb_train.build_tokenizer(ivb_train.examples(data_.train))
    model = vlm.init_vlm(ivb_train.vlm_config(config, tok.vocab_size), jax.random.key(0))
    from multimodal.indicvision.model import images_to_float
    batch = training_batch(tok, images_to_float([e[0] for e in examples], config.image_size),
                           [e[1] for e in examples], [e[2] for e in examples], length=48)
    batch = jax.tree.map(jnp.asarray, batch)
    params, _ = vlm.trainable_params(model)
    tx = optax.sgd(0.1)
    step = make_train_step(vlm.make_loss(model), tx, donate=False)
    one, m1 = step(init_train_state(params, tx, jax.random.key(0)), batch)
    mesh = sharding.make_mesh(data=8, devices=devices)
    eight, m8 = step(sharding.replicate(init_train_state(params, tx, jax.random.key(0)), mesh),
                     sharding.shard_batch(batch, mesh))
    assert len(m8["loss"].sharding.device_set) == 8
    np.testing.assert_allclose(m8["loss"], m1["loss"], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(eight.params), jax.tree.leaves(one.params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_stopped_training_resumes_to_the_uninterrupted_model(tmp_path):
    """Checkpoints every ckpt_every steps (state, batch sampler, history): stopped after 2 of 3 steps and rerun,
    training ends with the uninterrupted parameters, and metrics.jsonl repeats no row."""
    import dataclasses
    config = dataclasses.replace(EXPERIMENT.config("tiny"), ckpt_every=1)
    synthetic_data = ivb_train.make_data(config)
    whole = ivb_train.train(config, synthetic_data, workdir=tmp_path / "whole")
    assert ivb_train.train(config, synthetic_data, workdir=tmp_path / "killed", stop_after=2) is None
    resumed = ivb_train.train(config, synthetic_data, workdir=tmp_path / "killed")
    for a, b in zip(jax.tree.leaves(resumed.model.lm_params), jax.tree.leaves(whole.model.lm_params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    assert [h["step"] for h in resumed.history] == [h["step"] for h in whole.history] == [0, 2]
    def records(folder):
        return [json.loads(line) for line in (tmp_path / folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records("killed")] == [0, 2]
    for a, b in zip(records("killed"), records("whole")):
        assert a == pytest.approx(b, rel=1e-6)


def test_config_errors_name_the_stem_and_the_patch_it_needs():
    from multimodal.indicvision.configs import Config
    with pytest.raises(ValueError, match="vit_stem"):
        Config(vit_stem="resnet")
    with pytest.raises(ValueError, match="patch_size.*power of two"):
        Config(image_size=48, patch_size=6)  # the conv stem halves the image per layer
    assert Config(image_size=48, patch_size=6, vit_stem="patch").patch_size == 6
    assert ivb_train.vlm_config(Config(), 100).vision.stem == "conv"


def test_two_allocations_of_the_training_counts_share_the_test_items():
    """The benchmark's swapped allocation scores each script on the very items the main one does."""
    import dataclasses
    config = EXPERIMENT.config("tiny")
    swapped = dataclasses.replace(config, ocr_train=config.ocr_train[::-1], vqa_train=config.vqa_train[::-1],
                                  mmt_train=config.mmt_train[::-1])
    a, b = ivb_train.make_data(config), ivb_train.make_data(swapped)
    assert [r["language"] for r in b.train["ocr"].rows].count("Tamil") == config.ocr_train[0]
    for task in ("ocr", "vqa_indic", "mmt"):
        assert [r["id"] for r in a.test[task].rows] == [r["id"] for r in b.test[task].rows]
        for ra, rb in zip(a.test[task].rows, b.test[task].rows):
            np.testing.assert_array_equal(ra["image"], rb["image"])
    assert [r["text"] for r in a.test["ocr"].rows] == [r["text"] for r in b.test["ocr"].rows]
