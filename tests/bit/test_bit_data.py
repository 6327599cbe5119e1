"""Phonemes, simulator, and the '24 / '25 loaders (round trips and schema errors)."""

import numpy as np
import pytest
from scipy.io import savemat

from bit import data as data_lib
from bit import phonemes, simulate


def test_text_to_ids_hand_checked():
    # hello = HH AH0 L OW1, world = W ER1 L D (CMU dictionary), SIL after each word
    want = ["HH", "AH", "L", "OW", "SIL", "W", "ER", "L", "D", "SIL"]
    assert phonemes.ids_to_symbols(phonemes.text_to_ids("Hello, world!")) == want
    assert phonemes.NUM_CLASSES == 41 and phonemes.SIL == 40 and len(phonemes.PHONES) == 39


def test_unknown_word_and_empty_sentence_raise():
    with pytest.raises(ValueError, match="not in the CMU dictionary"):
        phonemes.text_to_ids("hello qwzxv")
    with pytest.raises(ValueError, match="no words"):
        phonemes.text_to_ids("?!")


def test_generator_is_deterministic_and_in_vocabulary():
    a, b = phonemes.generate_sentences(50, 3), phonemes.generate_sentences(50, 3)
    assert a == b and a != phonemes.generate_sentences(50, 4)
    vocab = set(phonemes.vocabulary())
    assert all(set(s.split()) <= vocab for s in a)


def test_schedule_shipped():
    sched = simulate.read_schedule()
    assert len(sched) == 265 and len(simulate.session_days(sched)) == 45
    assert sum(b.sentences for b in sched) == 11162


@pytest.fixture(scope="module")
def trials():
    world = simulate.World(simulate.SimConfig())
    sess = world.sessions([25, 60], seed=0)
    texts = phonemes.generate_sentences(6, 0)
    return simulate.simulate_session(world, sess[1], texts, [1, 1, 1, 2, 2, 2], seed=0)


def test_b2t24_round_trip(trials, tmp_path):
    path = simulate.write_b2t24(tmp_path / "s.mat", trials)
    s = data_lib.load_b2t24(path)
    assert s.texts == [t.text for t in trials]
    assert list(s.blocks) == [1, 1, 1, 2, 2, 2]
    for i, t in enumerate(trials):
        np.testing.assert_array_equal(s.counts[i], t.tx)
        np.testing.assert_array_equal(s.phone_ids[i], t.phone_ids)
        assert s.features[i].shape == (t.tx.shape[0], 256)
    # per-block z-scoring: each block's pooled features have mean 0 (live channels sd 1)
    block1 = np.concatenate(s.features[:3])
    np.testing.assert_allclose(block1.mean(0), 0.0, atol=1e-4)
    sd = block1.std(0)
    assert np.all((np.abs(sd - 1) < 1e-3) | (sd < 1e-6))


def test_b2t25_round_trip(trials, tmp_path):
    path = simulate.write_b2t25(tmp_path / "s.hdf5", trials)
    s = data_lib.load_b2t25(path)
    assert s.texts == [t.text for t in trials] and s.counts is None
    for i, t in enumerate(trials):
        assert s.features[i].shape == (t.tx.shape[0], 512)
        np.testing.assert_array_equal(s.phone_ids[i], t.phone_ids)


def test_b2t24_schema_errors(trials, tmp_path):
    cell = np.empty((1, 1), dtype=object)
    cell[0, 0] = np.zeros((10, 256), np.float32)
    good = {"sentenceText": np.array(["hello"]), "tx1": cell, "spikePow": cell, "blockIdx": np.array([[1.0]])}
    savemat(tmp_path / "ok.mat", good)
    assert data_lib.load_b2t24(tmp_path / "ok.mat").texts == ["hello"]
    savemat(tmp_path / "nokey.mat", {k: v for k, v in good.items() if k != "spikePow"})
    with pytest.raises(ValueError, match=r"missing keys \['spikePow'\]"):
        data_lib.load_b2t24(tmp_path / "nokey.mat")
    bad = np.empty((1, 1), dtype=object)
    bad[0, 0] = np.zeros((10, 100), np.float32)
    savemat(tmp_path / "shape.mat", {**good, "tx1": bad})
    with pytest.raises(ValueError, match=r"tx1\[0\] has shape \(10, 100\); expected \(T, 256\)"):
        data_lib.load_b2t24(tmp_path / "shape.mat")
    (tmp_path / "junk.mat").write_bytes(b"not a mat file")
    with pytest.raises(ValueError, match="not a readable"):
        data_lib.load_b2t24(tmp_path / "junk.mat")


def test_b2t25_schema_errors(tmp_path):
    import h5py
    with h5py.File(tmp_path / "a.hdf5", "w") as f:
        f.create_group("trial_0000").create_dataset("input_features", data=np.zeros((10, 100)))
    with pytest.raises(ValueError, match=r"input_features of shape \(10, 100\); expected \(T, 512\)"):
        data_lib.load_b2t25(tmp_path / "a.hdf5")
    with h5py.File(tmp_path / "b.hdf5", "w") as f:
        f.create_group("other")
    with pytest.raises(ValueError, match="no 'trial_\\*' groups"):
        data_lib.load_b2t25(tmp_path / "b.hdf5")


def test_simulator_drift_imagined_and_monkey():
    cfg = simulate.SimConfig()
    world = simulate.World(cfg)
    sess = world.sessions([25, 26, 400], seed=0)
    # drift grows with the day gap: one day moves the baseline less than 374 days
    assert np.abs(sess[1]["b"] - sess[0]["b"]).mean() < np.abs(sess[2]["b"] - sess[1]["b"]).mean()
    text = ["i want some water"] * 4
    att = simulate.simulate_session(world, sess[0], text, [1] * 4, seed=0)
    im = simulate.simulate_session(world, sess[0], text, [1] * 4, task="imagined", seed=0)
    assert np.array_equal(att[0].phone_ids, im[0].phone_ids)
    monkey = simulate.simulate_monkey(world, 3, alpha=0.0)
    assert monkey[0].shape[1] == cfg.monkey_channels
    with pytest.raises(ValueError, match="alpha=1.5"):
        simulate.simulate_monkey(world, 1, alpha=1.5)
    with pytest.raises(ValueError, match="task='spoken'"):
        simulate.simulate_session(world, sess[0], text, [1] * 4, task="spoken")
