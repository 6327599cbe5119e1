"""A training run on a folder of sessions in the real Brain-to-Text '24 / '25 release layouts (fixture files
written by the simulator's writers), the one-line bad-file errors, and words outside the lexicon."""

import dataclasses
import json

import h5py
import numpy as np
import pytest
from scipy.io import savemat

from bit import cascade, configs, metrics, phonemes, simulate, train
from bit import data as data_lib
from core.config import BadInputError, apply_overrides


def _trials(texts, seed, day=40):
    world = simulate.World(simulate.SimConfig())
    sess = world.sessions([day], seed=seed)[0]
    return simulate.simulate_session(world, sess, texts, [1 + i // 4 for i in range(len(texts))], seed=seed)


@pytest.fixture(scope="module")
def b2t24_dir(tmp_path_factory):
    """competitionData: train/<session>.mat and test/<session>.mat for two sessions."""
    root = tmp_path_factory.mktemp("competitionData")
    texts = phonemes.generate_sentences(24, 77)
    for k, name in enumerate(("t12.2022.05.05", "t12.2022.04.28")):
        simulate.write_b2t24(root / "train" / f"{name}.mat", _trials(texts[12 * k:12 * k + 8], k), area44_seed=k)
        simulate.write_b2t24(root / "test" / f"{name}.mat", _trials(texts[12 * k + 8:12 * k + 12], 10 + k))
    return root


@pytest.fixture(scope="module")
def b2t25_dir(tmp_path_factory):
    """hdf5_data_final: <session>/data_train.hdf5 and <session>/data_val.hdf5 for two sessions."""
    root = tmp_path_factory.mktemp("hdf5_data_final")
    texts = phonemes.generate_sentences(20, 78)
    for k, name in enumerate(("t15.2023.08.13", "t15.2023.08.11")):
        simulate.write_b2t25(root / name / "data_train.hdf5", _trials(texts[10 * k:10 * k + 6], k), session=name)
        simulate.write_b2t25(root / name / "data_val.hdf5", _trials(texts[10 * k + 6:10 * k + 10], 5 + k),
                             session=name)
    return root


def test_training_run_on_b2t24_folder(b2t24_dir, tmp_path):
    cfg = apply_overrides(configs.tiny(), [f"data.data_dir={b2t24_dir}", "data.labelled=12"])
    data = train.build_data(cfg, tmp_path)
    # sessions numbered by name: 04.28 -> 0, 05.05 -> 1; train rows in that order
    assert data["num_sessions"] == 2 and list(data["train"]["session"]) == [0] * 8 + [1] * 8
    assert data["train"]["x"].shape[2] == 256 and data["test"]["x"].shape[0] == 8
    want = data_lib.load_b2t24(b2t24_dir / "train" / "t12.2022.04.28.mat")
    assert data["train_text"][:8] == want.texts and data["lm_text"] == data["train_text"]
    np.testing.assert_array_equal(data["train"]["counts"][0, :len(want.counts[0])], want.counts[0])
    t_max = max(len(x) for x in want.features)
    assert data["train"]["x"].shape[1] >= t_max and data["train"]["x"].shape[1] % cfg.model.patch == 0
    assert "imagined_test" not in data and "oracle" not in data
    out = train.run(cfg, tmp_path / "run")
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["labelled"] == 12 and out["pretrained"]
    for key in ("per_greedy", "per_beam", "wer_cascade", "wer_greedy_lexicon"):
        assert np.isfinite(saved[key]) and saved[key] >= 0.0, key


def test_b2t25_folder_with_512_features(b2t25_dir, tmp_path):
    cfg = apply_overrides(configs.tiny(), [f"data.data_dir={b2t25_dir}", "data.layout=b2t25",
                                           "data.num_features=512", "train.recon_loss=mse"])
    data = train.build_data(cfg, tmp_path)
    assert data["train"]["x"].shape[2] == 512 and data["num_sessions"] == 2
    assert list(data["train"]["session"]) == [0] * 6 + [1] * 6 and len(data["test_text"]) == 8
    want = data_lib.load_b2t25(b2t25_dir / "t15.2023.08.11" / "data_train.hdf5")
    assert data["train_text"][:6] == want.texts
    np.testing.assert_array_equal(data["train"]["labels"][0, :len(want.phone_ids[0])], want.phone_ids[0])
    assert data["channel_mask"].shape == (2, 512)  # the MSE reconstructs the features themselves


def _one_line(excinfo):
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    return msg


def test_folder_errors_name_the_file_and_the_layout(b2t24_dir, b2t25_dir, tmp_path):
    with pytest.raises(BadInputError) as e:
        data_lib.load_dir(tmp_path / "nowhere", "b2t24")
    assert "no such folder" in _one_line(e) and "train/*.mat" in str(e.value)
    with pytest.raises(BadInputError) as e:  # a '25 folder read as '24: the hint names the field to set
        data_lib.load_dir(b2t25_dir, "b2t24")
    assert "no train/*.mat session files" in _one_line(e) and "set data.layout=b2t25" in str(e.value)
    with pytest.raises(BadInputError) as e:
        data_lib.load_b2t24(tmp_path / "missing.mat")
    assert "missing.mat: no such file" in _one_line(e)
    # a session file with a key missing / a wrong shape, inside a folder: the error names that file
    bad = tmp_path / "bad"
    (bad / "train").mkdir(parents=True)
    (bad / "test").mkdir()
    cell = np.empty((1, 1), dtype=object)
    cell[0, 0] = np.zeros((10, 256), np.float32)
    good = {"sentenceText": np.array(["hello"]), "tx1": cell, "spikePow": cell, "blockIdx": np.array([[1.0]])}
    savemat(bad / "test" / "t12.2022.04.28.mat", good)
    savemat(bad / "train" / "t12.2022.04.28.mat", {k: v for k, v in good.items() if k != "blockIdx"})
    with pytest.raises(BadInputError) as e:
        train.build_data(apply_overrides(configs.tiny(), [f"data.data_dir={bad}"]), tmp_path)
    assert "train/t12.2022.04.28.mat: missing keys ['blockIdx']" in _one_line(e)
    narrow = np.empty((1, 1), dtype=object)
    narrow[0, 0] = np.zeros((10, 128), np.float32)
    savemat(bad / "train" / "t12.2022.04.28.mat", {**good, "spikePow": narrow})
    with pytest.raises(BadInputError) as e:
        data_lib.load_dir(bad, "b2t24")
    assert "t12.2022.04.28.mat: spikePow[0] has shape (10, 128); expected (T, 256)" in _one_line(e)
    with h5py.File(tmp_path / "a.hdf5", "w") as f:
        g = f.create_group("trial_0000")
        g.create_dataset("input_features", data=np.zeros((10, 512)))
        g.create_dataset("seq_class_ids", data=np.zeros(500, np.int32))
    with pytest.raises(BadInputError) as e:
        data_lib.load_b2t25(tmp_path / "a.hdf5")
    assert "a.hdf5/trial_0000: seq_class_ids without a 'seq_len' attribute" in _one_line(e)
    (tmp_path / "junk.hdf5").write_bytes(b"not hdf5")
    with pytest.raises(BadInputError) as e:
        data_lib.load_b2t25(tmp_path / "junk.hdf5")
    assert "junk.hdf5: not a readable hdf5 file" in _one_line(e)


def test_layout_config_checks():
    with pytest.raises(BadInputError, match="train.recon_loss='poisson': expected 'mse' with data.layout='b2t25'"):
        apply_overrides(configs.tiny(), ["data.layout=b2t25", "data.num_features=512"])
    with pytest.raises(BadInputError, match="data.num_features=256: expected at least 512"):
        apply_overrides(configs.tiny(), ["data.layout=b2t25", "train.recon_loss=mse"])
    with pytest.raises(BadInputError, match="data.layout='b2t26'"):
        apply_overrides(configs.tiny(), ["data.layout=b2t26"])
    with pytest.raises(BadInputError, match="train.pretrain_features='sbp'"):
        apply_overrides(configs.tiny(), ["train.pretrain_features=sbp"])


# --- words outside the lexicon --------------------------------------------------------------------------------

def test_word_without_pronunciation_is_an_error_or_uses_the_pronunciation_file(tmp_path):
    trials = _trials(["i want water", "we like coffee"], 0)
    trials[1] = dataclasses.replace(trials[1], text="we like zorbly coffee")
    path = simulate.write_b2t24(tmp_path / "s.mat", trials)
    with pytest.raises(BadInputError) as e:
        data_lib.load_b2t24(path)
    msg = _one_line(e)
    assert "s.mat: trial 1" in msg and "['zorbly']" in msg and "data.pronunciations" in msg
    pron = tmp_path / "extra.dict"
    pron.write_text(";;; our own\nZORBLY  Z AO1 R B L IY0\n")
    s = data_lib.load_b2t24(path, phonemes.read_pronunciations(pron))
    want = ["W", "IY", "SIL", "L", "AY", "K", "SIL", "Z", "AO", "R", "B", "L", "IY", "SIL", "K", "AA", "F", "IY",
            "SIL"]
    assert phonemes.ids_to_symbols(s.phone_ids[1]) == want  # the word is labelled, not dropped
    pron.write_text("ZORBLY  Z QQ R\n")
    with pytest.raises(BadInputError, match=r"extra.dict:1: 'ZORBLY  Z QQ R'; expected 'WORD' then CMU phones"):
        phonemes.read_pronunciations(pron)


def test_lm_corpus_drops_sentences_with_unpronounceable_words_as_the_official_recipe():
    texts = ["I want water.", "we like zorbly coffee", "hello world", "?!"]
    kept, lexicon = cascade.lm_corpus(texts)
    assert kept == [["i", "want", "water"], ["hello", "world"]]  # not "we like coffee" with the word deleted
    assert lexicon.words == ["hello", "i", "want", "water", "world"] and lexicon.dropped_sentences == 1
    kept, lexicon = cascade.lm_corpus(texts, {"zorbly": ["Z", "AO", "R", "B", "L", "IY"]})
    assert len(kept) == 3 and "zorbly" in lexicon.words and lexicon.dropped_sentences == 0
    # a test word outside the lexicon stays in the reference: it counts as an error, never silently dropped
    assert lexicon.oov_rate(["i want tea", "hello world"]) == pytest.approx(1 / 5)
    assert metrics.wer(["i want tea"], ["i want"]) == pytest.approx(1 / 3)
