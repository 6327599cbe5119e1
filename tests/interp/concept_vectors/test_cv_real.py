"""The real-model path on a random-init HF folder with a word-level tokenizer (a smoke test of the plumbing:
shipped datasets -> text prompts -> tokens -> CIE / RSA -> top heads and the reference comparison)."""

import json

import jax
import numpy as np
import pytest

from core.config import ConfigError
from core.lm import model as model_lib
from core.lm.configs import LMConfig
from core.lm.tokenizer import train_word_level
from core.lm.weights import save_hf
from interp.concept_vectors import real


def test_real_path_on_a_tiny_hf_folder(tmp_path):
    data = real.load_datasets()
    assert {c for c, _, _ in real.DATASETS} <= set(data) and len(real.DATASETS) == 18
    texts = [w for c in data if c != "provenance" for lang in data[c] for p in data[c][lang] for w in p]
    tok = train_word_level(texts + ["Q:", "A:", "###", "Instruction:", "Response:", "?", "(", ")", "(a)", "(b)",
                                    "(c)", "(d)", "a", "b", "c", "d"])
    config = LMConfig(architecture="qwen2", vocab_size=tok.vocab_size, hidden_size=16, intermediate_size=32,
                      num_layers=2, num_heads=2, num_kv_heads=1, head_dim=8)
    _, params = model_lib.init(config, jax.random.key(0))
    save_hf(tmp_path / "model", config, params)
    tok.save(tmp_path / "model")
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "results_CIE_Meta-LLama-3.1-8B.csv").write_text("Layer,Head,Weight\n" + "".join(
        f"{l},{h},{l + h / 10}\n" for l in range(2) for h in range(2)))
    (ref / "results_sim_mat_rsa_Meta-LLama-3.1-8B.csv").write_text("layer,head,relation\n" + "".join(
        f"{l},{h},{h - l}\n" for l in range(2) for h in range(2)))
    res = real.run_real(tmp_path / "model", tmp_path / "out", num_prompts=2, shots=2, top_k=2, batch=12,
                        sweep_batch=4, reference=ref, dtype="float32", steer=True, steer_heads=2, num_steer=3)
    assert np.shape(res["cie"]) == (2, 2) and np.shape(res["rsa"]["concept"]) == (2, 2)
    assert np.isfinite(res["cie"]).all() and len(res["fv_heads"]) == 2
    assert res["reference"]["cie"]["reference_top"] == [(1, 0), (1, 1)]
    assert (tmp_path / "out" / "cie.png").exists()
    saved = json.loads((tmp_path / "out" / "real_results.json").read_text())
    assert len(saved["accuracy"]) == 18
    # steering: 6 concepts x {FV, CV} x 4 extraction formats x 2 layers x 3 weights
    rows = saved["steering"]["rows"]
    assert len(rows) == 6 * 2 * 4 * 2 * 3
    assert all(r["kl_from_id"] == 0.0 for r in rows if r["extract"] == "eng-OE")
    assert all(-1 <= r["delta_p"] <= 1 and r["kl_from_id"] >= 0 for r in rows)
    for m, summary in saved["steering"]["summary"].items():
        mine = [r for r in rows if r["method"] == m and r["extract"] == "eng-OE"]
        score = {(layer, w): np.mean([r["delta_p"] for r in mine if (r["layer"], r["weight"]) == (layer, w)])
                 for layer in range(2) for w in (1.0, 5.0, 10.0)}
        assert score[(summary["layer"], summary["weight"])] == max(score.values())
        assert set(summary["per_concept"]) == set(real.CONCEPTS)


def test_shipped_spanish_pairs_and_a_dataset_file_without_them(tmp_path):
    data = real.load_datasets()
    assert all(len(data[c]["es"]) >= 30 for c in real.CONCEPTS)
    assert ["isla", "islas"] in data["singularPlural"]["es"]  # Spanish plural through the english-spanish pairs
    (tmp_path / "d.json").write_text(json.dumps({c: {k: v for k, v in data[c].items() if k != "es"}
                                                 for c in real.CONCEPTS}))
    with pytest.raises(ConfigError, match="no 'es' pairs for concept 'antonym'"):
        real.extraction_means(None, None, type("T", (), {"bos_id": None, "pad_id": 0})(),
                              real.load_datasets(tmp_path / "d.json"), shots=2, num_prompts=2, batch=2, seed=0)


def test_steer_metrics_against_a_hand_computation():
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    q = np.array([[0.5, 0.25, 0.25], [0.2, 0.2, 0.6]])  # the in-distribution-steered distribution
    targets, base_p = np.array([0, 1]), np.array([0.5, 0.4])
    delta_p, accuracy, kl = real._steer_metrics(np.log(p), np.log(q), targets, base_p)
    assert np.isclose(float(delta_p), ((0.7 - 0.5) + (0.3 - 0.4)) / 2, atol=1e-6)
    assert float(accuracy) == 0.5  # argmax 0 (right), argmax 2 (wrong)
    kl_by_hand = np.mean([(q[i] * np.log(q[i] / p[i])).sum() for i in range(2)])
    assert np.isclose(float(kl), kl_by_hand, atol=1e-6)
