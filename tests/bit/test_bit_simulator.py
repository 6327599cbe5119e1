"""The multi-participant simulator, the rate oracle (hand-checked and the tuned signal margin), and CTC
feasibility of the `paper` preset's frame rate on its simulated trials."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bit import configs, losses, phonemes, simulate, train
from core.config import BadInputError


def test_participants_share_targets_not_mappings():
    cfg = simulate.SimConfig()
    target, other = simulate.World(cfg), simulate.World(cfg, participant=2)
    np.testing.assert_array_equal(target.mu, other.mu)  # the shared speech structure
    assert not np.allclose(target.w0, other.w0) and not np.allclose(target.b0, other.b0)
    assert not np.array_equal(target.tuned, other.tuned)
    # participant 0 is the world the single-participant simulator drew (same stream)
    np.testing.assert_array_equal(simulate.World(cfg, participant=0).w0, target.w0)
    sessions = other.sessions([30, 40], seed=0)
    assert [s["participant"] for s in sessions] == [2, 2]
    # the same text on the same day: the two participants' counts differ (own W, baselines and noise streams)
    a = simulate.simulate_session(target, target.sessions([30], seed=0)[0], ["i want water"], [1], seed=0)
    b = simulate.simulate_session(other, sessions[0], ["i want water"], [1], seed=0)
    assert a[0].tx.shape[1] == b[0].tx.shape[1] and not np.array_equal(a[0].rate[:5], b[0].rate[:5])
    with pytest.raises(BadInputError, match="participant=-1"):
        simulate.World(cfg, participant=-1)


def test_participant_days():
    days = simulate.session_days()
    target = simulate.participant_days(0, 8)
    assert target == [days[i] for i in np.linspace(0, 44, 8).round().astype(int)]
    one, two = simulate.participant_days(1, 8), simulate.participant_days(2, 8)
    assert one == simulate.participant_days(1, 8)  # deterministic
    assert len(one) == 8 and one == sorted(one) and one != target and one != two
    # a subset of the T15 days, shifted by one offset in 0..90 days
    assert any(all(x - shift in days for x in one) for shift in range(91))
    with pytest.raises(BadInputError, match="n=46 sessions"):
        simulate.participant_days(1, 46)


def _trial(tx, rate, block=1):
    tx, rate = np.asarray(tx, np.float32), np.asarray(rate, np.float32)
    return simulate.Trial("a", tx, tx, block, np.array([1, 40]), rate)


def test_rate_oracle_hand_checked():
    # one live channel (rates 1, 3; counts 0, 4) and one dead channel (rate 0, no counts: left out)
    tr = _trial([[0, 0], [4, 0]], [[1.0, 0.0], [3.0, 0.0]])
    true = (1.0 + (3.0 - 4 * math.log(3.0) + math.log(24.0))) / 2
    const = (2.0 + (2.0 - 4 * math.log(2.0) + math.log(24.0))) / 2  # the constant is the mean count, 2
    out = simulate.rate_oracle([[tr]])
    assert out["true_rate_nll"] == pytest.approx(true, rel=1e-6)
    assert out["constant_rate_nll"] == pytest.approx(const, rel=1e-6)
    assert out["relative_gain"] == pytest.approx(1 - true / const, rel=1e-6)
    assert out["bits_per_spike"] == pytest.approx(2 * (const - true) / (4 * math.log(2)), rel=1e-6)
    assert out["mean_count"] == pytest.approx(2.0)
    # the constant is fitted per block: two blocks with constant rates 1 and 3 leave the true rate no edge
    a, b = _trial([[1], [1]], [[1.0], [1.0]], block=1), _trial([[3], [3]], [[3.0], [3.0]], block=2)
    assert simulate.rate_oracle([[a, b]])["relative_gain"] == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(BadInputError, match="without its true rate"):
        simulate.rate_oracle([[dataclasses.replace(tr, rate=None)]])


def test_default_simulator_has_a_learnable_signal():
    """The tuned default (gain 1.0): counts under the true rates beat the best per-block constant by > 10 % of
    the NLL (the single-participant simulator at gain 0.45 gave ~2.7 %, so pretraining had nothing to learn)."""
    world = simulate.World(simulate.SimConfig())
    sess = world.sessions(simulate.participant_days(0, 2), seed=0)
    texts = phonemes.generate_sentences(16, 3)
    trials = [simulate.simulate_session(world, s, texts[8 * i:8 * i + 8], [1] * 8, seed=0) for i, s in enumerate(sess)]
    out = simulate.rate_oracle(trials)
    assert out["relative_gain"] > 0.10 and out["bits_per_spike"] > 0.25
    weak = simulate.World(simulate.SimConfig(gain=0.45))
    trials = [simulate.simulate_session(weak, s, texts[8 * i:8 * i + 8], [1] * 8, seed=0)
              for i, s in enumerate(weak.sessions(simulate.participant_days(0, 2), seed=0))]
    assert simulate.rate_oracle(trials)["relative_gain"] < 0.05


def test_ctc_min_frames_hand_checked():
    labels = jnp.array([[1, 1, 2, 0], [5, 5, 5, 9], [3, 4, 3, 0]])
    # [1 1 2]: one repeat -> 4; [5 5 5] (the 9 is padding): two repeats -> 5; [3 4 3]: none -> 3
    np.testing.assert_array_equal(np.asarray(losses.ctc_min_frames(labels, jnp.array([3, 3, 3]))), [4, 5, 3])


def test_paper_preset_frame_rate_keeps_trials_ctc_feasible():
    """Every simulated trial (attempted and imagined) of the paper preset's simulator gets at least as many CTC
    frames as its labels need (length + repeats), at the preset's patch and ctc_upsample."""
    cfg = configs.paper()
    m = cfg.model
    world = simulate.World(cfg.sim)
    sess = world.sessions(simulate.participant_days(0, 3), seed=0)
    texts = phonemes.generate_sentences(600, 11)
    trials = []
    for i, s in enumerate(sess):
        chunk = texts[200 * i:200 * i + 200]
        trials += simulate.simulate_session(world, s, chunk, [1] * len(chunk), seed=0,
                                            task="imagined" if i == 2 else "attempted")
    frames = np.array([-(-len(t.tx) // m.patch) * m.ctc_upsample for t in trials])
    width = max(len(t.phone_ids) for t in trials)
    labels = np.stack([np.pad(t.phone_ids, (0, width - len(t.phone_ids))) for t in trials])
    need = np.asarray(losses.ctc_min_frames(jnp.asarray(labels), jnp.array([len(t.phone_ids) for t in trials])))
    assert np.all(frames >= need), f"{(frames < need).sum()} of {len(trials)} trials infeasible"
    # and the check has teeth: BIT's one frame per patch would not do on this simulated speech rate
    assert np.mean(frames // m.ctc_upsample < need) > 0.3


def test_multi_participant_data_layout(tmp_path):
    cfg = configs.tiny()
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, other_participants=2, other_sessions=2,
                                                            other_per_session=3))
    d = cfg.data
    data = train.build_data(cfg, tmp_path)
    assert data["num_datasets"] == 4
    assert data["num_sessions"] == d.sessions + d.monkey_sessions + 2 * 2
    assert data["other_pretrain_count"] == 2 * 2 * 3
    # the target participant's sets are its own: dataset 0, its session ids
    for key in ("train", "test", "imagined_test", "pretrain_target"):
        assert set(data[key]["dataset"]) == {0} and data[key]["session"].max() < d.sessions
    human = data["pretrain_human"]
    others = human["dataset"] >= 2
    assert set(human["dataset"][others]) == {2, 3} and others.sum() == 12
    first = d.sessions + d.monkey_sessions
    assert set(human["session"][others]) == set(range(first, first + 4))
    assert set(data["pretrain"]["dataset"]) == {0, 1, 2, 3}
    assert len(list((tmp_path / "data").glob("p2_day*_attempted.mat"))) == 2
    _, params = train.init_model(cfg, data["num_sessions"], jax.random.key(0))
    assert params["in_w"][...].shape[0] == 4 and params["day_scale"][...].shape[0] == data["num_sessions"]
