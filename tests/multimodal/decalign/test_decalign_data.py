"""MMSA pickle loader (schema errors), the synthetic generator, and the shipped sample."""

import pathlib
import pickle

import numpy as np
import pytest

from multimodal.decalign import data as D

SAMPLE = pathlib.Path(__file__).with_name("decalign_sample_mmsa.pkl")


def _tiny(**kw):
    args = dict(n_train=6, n_valid=3, n_test=3, seq_len=4, dim_text=8, dim_audio=5, dim_vision=20, seed=1)
    args.update(kw)
    return D.generate(**args)


def test_sample_pickle_loads_with_mmsa_layout():
    data = D.load_mmsa(SAMPLE)
    assert set(data) == {"train", "valid", "test"}
    tr = data["train"]
    assert tr["text"].shape == (16, 4, 8) and tr["audio"].shape == (16, 4, 5) and tr["vision"].shape == (16, 4, 20)
    assert tr["labels"].dtype == np.float32 and np.abs(tr["labels"]).max() <= 3
    assert SAMPLE.stat().st_size < 32_000


def test_generator_roundtrip_and_properties(tmp_path):
    raw = _tiny(heterogeneity=0.0)
    path = D.write_mmsa(raw, tmp_path / "s.pkl")
    back = D.load_mmsa(path)
    np.testing.assert_array_equal(back["train"]["text"], raw["train"]["text"])
    np.testing.assert_array_equal(back["test"]["labels"], raw["test"]["regression_labels"])
    hetero = _tiny(heterogeneity=1.0)
    # the heterogeneity knob changes the features but not the prediction problem
    np.testing.assert_array_equal(hetero["train"]["regression_labels"], raw["train"]["regression_labels"])
    assert not np.allclose(hetero["train"]["audio"], raw["train"]["audio"])
    cls = D.load_mmsa(path, task="classification")["train"]["labels"]
    assert cls.dtype == np.int32 and cls.min() >= 0 and cls.max() <= 6


def test_generator_label_depends_on_shared_and_unique():
    raw = _tiny(n_train=2000, heterogeneity=0.0, noise=0.0)
    y = raw["train"]["regression_labels"]
    assert -3 <= y.min() and y.max() <= 3 and y.std() > 0.5
    frac_int = np.mean(y == np.round(y))
    assert 0.4 < frac_int < 0.8  # round_fraction 0.5 plus labels that are already integers at 0.1 precision


def _write(tmp_path, raw):
    p = tmp_path / "bad.pkl"
    with p.open("wb") as f:
        pickle.dump(raw, f)
    return p


def test_schema_errors_name_key_and_expectation(tmp_path):
    raw = _tiny()
    bad = {s: dict(v) for s, v in raw.items()}
    del bad["valid"]["audio"]
    with pytest.raises(D.DataSchemaError, match=r"valid: missing key 'audio'"):
        D.load_mmsa(_write(tmp_path, bad))
    bad = {s: dict(v) for s, v in raw.items()}
    bad["train"]["vision"] = bad["train"]["vision"][:, :, 0]
    with pytest.raises(D.DataSchemaError, match=r"train.vision: shape \(6, 4\): expected \(N, L, D\)"):
        D.load_mmsa(_write(tmp_path, bad))
    bad = {s: dict(v) for s, v in raw.items()}
    bad["test"]["audio"] = bad["test"]["audio"][:2]
    with pytest.raises(D.DataSchemaError, match=r"test.audio: 2 examples: expected 3"):
        D.load_mmsa(_write(tmp_path, bad))
    bad = {s: dict(v) for s, v in raw.items()}
    bad["train"]["regression_labels"] = bad["train"]["regression_labels"] * 10
    with pytest.raises(D.DataSchemaError, match=r"expected finite values in \[-3, 3\]"):
        D.load_mmsa(_write(tmp_path, bad))
    bad = {s: dict(v) for s, v in raw.items()}
    bad["valid"]["text"] = bad["valid"]["text"][:, :, :3]
    with pytest.raises(D.DataSchemaError, match=r"valid.text: per-example shape \(4, 3\): expected \(4, 8\)"):
        D.load_mmsa(_write(tmp_path, bad))
    with pytest.raises(D.DataSchemaError, match=r"missing split 'test'"):
        D.load_mmsa(_write(tmp_path, {"train": raw["train"], "valid": raw["valid"]}))
    bad = {s: dict(v) for s, v in raw.items()}
    bad["train"]["text"] = bad["train"]["text"].copy()
    bad["train"]["text"][0, 0, 0] = np.nan
    with pytest.raises(D.DataSchemaError, match="NaN"):
        D.load_mmsa(_write(tmp_path, bad))
    with pytest.raises(FileNotFoundError, match="no such MMSA pickle"):
        D.load_mmsa(tmp_path / "missing.pkl")


def test_minus_inf_audio_is_zeroed_as_in_mmsa(tmp_path):
    raw = _tiny()
    raw["train"]["audio"][0, 0, 0] = -np.inf
    data = D.load_mmsa(_write(tmp_path, raw))
    assert data["train"]["audio"][0, 0, 0] == 0.0 and np.isfinite(data["train"]["audio"]).all()
