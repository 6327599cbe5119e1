"""Neural-data simulator: sentences -> phoneme timings -> latent articulator -> Poisson threshold crossings and
spike-band power, with day-to-day drift from a real session schedule, written in the exact Brain-to-Text '24
(`.mat`) and '25 (hdf5) file formats so the real loaders (bit/data.py) read it.

Generative model (per session s on post-implant day d_s):
  phones  p_1..p_n from the CMU dictionary, SIL after every word; lognormal durations; a go delay;
  latent  x (16-d), damped second-order dynamics pulled to per-phone targets mu_p (shared by all humans):
            v_{t+1} = v_t + k (u_t - x_t) - c v_t + noise,   x_{t+1} = x_t + v_{t+1};
  rates   log lambda_t = b_s + g_s * W_s x_t + o_block  (per 20 ms bin; ~60 % of channels tuned);
  tx      ~ Poisson(lambda_t) (tx1 at -4.5 RMS; tx2..4 binomially thinned from it), sbp = lambda * lognormal;
  drift   b, g and W random-walk with sd proportional to sqrt(days since the last session); channels die;
          every block adds its own channel offsets.
"Imagined" speech uses the same targets with a lower gain, more timing jitter and a partly rotated W.
A "monkey" species has its own channels and W and a reach latent; `alpha` in [0, 1] sets how much of its
latent follows the human phone-target dynamics (0: none, pure reach dynamics).
"""

from __future__ import annotations

import csv
import dataclasses
import pathlib
from collections.abc import Sequence

import numpy as np

from bit import phonemes
from core.config import BadInputError

SCHEDULE_CSV = pathlib.Path(__file__).resolve().parent / "data" / "t15_copyTaskData_description.csv"
BIN_S = 0.02


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimConfig:
    """Simulator knobs. `gain` is the modulation depth that sets the difficulty (SNR)."""

    latent_dim: int = 16  # dimension of the latent articulator state driving the channels
    channels: int = 128  # simulated area-6v electrodes ('24 files also get 128 untuned area-44 columns)
    tuned_fraction: float = 0.6  # fraction of channels tuned to the latent (the rest carry baseline rate only)
    rate_hz: tuple[float, float] = (5.0, 50.0)  # (low, high) range of baseline firing rates, in Hz (log-uniform)
    # modulation depth of log-rate by the latent (the SNR). 1.0: the true rates beat the best per-block constant
    # by ~22 % of the Poisson NLL (~0.57 bits/spike, rate_oracle); at 0.45 (before participants) only ~2.7 %
    gain: float = 1.0
    phone_bins: float = 4.0  # mean phone duration (bins of 20 ms)
    sil_bins: tuple[int, int] = (2, 8)  # (min, max) silence duration between words, in bins (uniform)
    duration_sd: float = 0.3  # sd of log phone duration (attempted speech)
    go_bins: tuple[int, int] = (4, 10)  # (min, max) rest bins before speech onset; the min is also appended after
    stiffness: float = 0.3  # spring constant pulling the latent to each phone's target, per bin
    damping: float = 0.6  # velocity damping of the latent dynamics, per bin
    process_noise: float = 0.05  # sd of the Gaussian noise added to the latent velocity each bin
    drift_baseline: float = 0.02  # sd of log-baseline change per sqrt(day)
    drift_gain: float = 0.01  # sd of per-channel log-gain change per sqrt(day)
    drift_w: float = 0.01  # sd of tuning-matrix (W) entry change per sqrt(day), tuned channels only
    death_per_day: float = 0.0005  # probability per day that a channel goes silent for good
    block_offset: float = 0.1  # sd of a per-block, per-channel log-rate offset
    sbp_noise: float = 0.5  # sd of log-normal noise on spike-band power around the rate
    max_bins: int = 160  # longest trial in bins (longer sentences lose trailing words; the padded length)
    # imagined speech
    imagined_gain: float = 0.4  # imagined-speech modulation depth as a fraction of `gain`
    imagined_jitter: float = 0.6  # sd of log phone duration in imagined speech
    imagined_rotation: float = 0.5  # radians of W rotation away from attempted
    # monkey
    monkey_channels: int = 96  # electrodes of a simulated monkey session
    reach_bins: float = 12.0  # mean reach-segment duration, in bins (mixed with phone_bins by data.alpha)
    reach_stiffness: float = 0.1  # reach dynamics' spring constant (mixed with stiffness by data.alpha)
    reach_damping: float = 0.4  # reach dynamics' damping (mixed with damping by data.alpha)
    target_scale: float = 1.0  # sd of the per-phone latent targets mu_p (their separation against the noise)
    seed: int = 0  # the "world": phone targets, the human W, baselines

    def __post_init__(self):
        if self.latent_dim < 1 or self.channels < 1 or self.monkey_channels < 1:
            raise BadInputError(f"latent_dim={self.latent_dim}, channels={self.channels}, monkey_channels="
                                f"{self.monkey_channels}: expected positive sizes")
        if not 0.0 < self.tuned_fraction <= 1.0:
            raise BadInputError(f"tuned_fraction={self.tuned_fraction}: expected a number in (0, 1]")
        if self.gain < 0 or self.max_bins < 20:
            raise BadInputError(f"gain={self.gain}, max_bins={self.max_bins}: expected gain >= 0, max_bins >= 20")


@dataclasses.dataclass(frozen=True)
class Block:
    day: int
    block: int
    sentences: int
    corpus: str
    split: str


def read_schedule(path: str | pathlib.Path = SCHEDULE_CSV) -> list[Block]:
    """The T15 copy-task block schedule (45 sessions, 265 blocks; columns as in nejm-brain-to-text)."""
    rows = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        need = {"Post-implant day", "Block number", "Number of sentences", "Corpus", "Split"}
        if not need <= set(reader.fieldnames or ()):
            raise BadInputError(f"{path}: columns {reader.fieldnames}; expected at least {sorted(need)}")
        for r in reader:
            rows.append(Block(int(r["Post-implant day"]), int(r["Block number"]), int(r["Number of sentences"]),
                              r["Corpus"], r["Split"]))
    return rows


def session_days(schedule: Sequence[Block] | None = None) -> list[int]:
    return sorted({b.day for b in (schedule or read_schedule())})


@dataclasses.dataclass
class Trial:
    """One simulated sentence: tx1 counts (T, C), sbp (T, C), the text, its block, the phone ids, and the true
    Poisson rate (T, C) the counts were drawn from (for the oracle check; not written to the files)."""

    text: str
    tx: np.ndarray
    sbp: np.ndarray
    block: int
    phone_ids: np.ndarray
    rate: np.ndarray | None = None


class World:
    """The ground truth of one human participant and its drift over sessions. The per-phone latent targets `mu`
    are shared by every participant (the speech structure that makes cross-participant pretraining useful); each
    participant has its own electrode-to-latent mapping W, tuned-channel set, baselines and drift.
    `World(cfg)` is participant 0, the target participant (its draws are the same as before participants)."""

    def __init__(self, cfg: SimConfig, participant: int = 0):
        if participant < 0:
            raise BadInputError(f"participant={participant}: expected an index >= 0 (0 = the target participant)")
        self.cfg, self.participant = cfg, int(participant)
        rng = np.random.default_rng([cfg.seed, 0])
        d, c = cfg.latent_dim, cfg.channels
        self.mu = rng.normal(size=(phonemes.NUM_CLASSES, d)) * cfg.target_scale
        self.mu[phonemes.SIL] *= 0.3  # silence: near rest
        self.mu[phonemes.BLANK] = 0.0
        if participant:  # an own stream for everything but the shared targets
            rng = np.random.default_rng([cfg.seed, 5, participant])
        tuned = rng.random(c) < cfg.tuned_fraction
        self.tuned = tuned
        self.w0 = rng.normal(size=(c, d)) / np.sqrt(d) * tuned[:, None]
        self.w_perp = rng.normal(size=(c, d)) / np.sqrt(d) * tuned[:, None]
        lo, hi = np.log(np.array(cfg.rate_hz) * BIN_S)
        self.b0 = rng.uniform(lo, hi, size=c)

    def sessions(self, days: Sequence[int], seed: int) -> list[dict]:
        """Per-session parameters (b, gain, W, alive) after drift along `days` (sorted post-implant days)."""
        cfg = self.cfg
        rng = np.random.default_rng([cfg.seed, 1, seed] + ([self.participant] if self.participant else []))
        b, g, w = self.b0.copy(), np.ones(cfg.channels), self.w0.copy()
        alive = np.ones(cfg.channels, bool)
        out, prev = [], days[0] if days else 0
        for day in days:
            gap = np.sqrt(max(day - prev, 0))
            b = b + rng.normal(0, cfg.drift_baseline * gap, cfg.channels)
            g = g * np.exp(rng.normal(0, cfg.drift_gain * gap, cfg.channels))
            w = w + rng.normal(0, cfg.drift_w * gap, w.shape) * (np.abs(self.w0).sum(1, keepdims=True) > 0)
            alive &= rng.random(cfg.channels) >= cfg.death_per_day * max(day - prev, 0)
            out.append({"day": int(day), "b": b.copy(), "g": g.copy(), "w": w.copy(), "alive": alive.copy(),
                        "participant": self.participant})
            prev = day
        return out


def participant_days(participant: int, n: int, schedule: Sequence[Block] | None = None) -> list[int]:
    """`n` session days of a participant. Participant 0 (the target): the T15 schedule's days, evenly spread.
    Others: `n` of those days drawn at random (per participant) and shifted by 0-90 days, so every participant
    has its own gaps and so its own drift."""
    days = session_days(schedule)
    if not 1 <= n <= len(days):
        raise BadInputError(f"n={n} sessions: expected 1..{len(days)} (the T15 schedule's sessions)")
    if participant == 0:
        return [days[i] for i in np.linspace(0, len(days) - 1, n).round().astype(int)]
    rng = np.random.default_rng([7, participant])
    pick = np.sort(rng.choice(len(days), n, replace=False))
    shift = int(rng.integers(0, 91))
    return [int(days[i]) + shift for i in pick]


def _durations(rng, ids: np.ndarray, cfg: SimConfig, jitter: float) -> np.ndarray:
    dur = np.exp(rng.normal(np.log(cfg.phone_bins), jitter, len(ids)))
    sil = rng.integers(cfg.sil_bins[0], cfg.sil_bins[1] + 1, len(ids))
    return np.maximum(np.where(ids == phonemes.SIL, sil, np.round(dur)), 1).astype(int)


def _integrate(targets: np.ndarray, k: float, c: float, noise: float, rng) -> np.ndarray:
    """Damped second-order dynamics pulled to the target sequence (T, d) -> latent (T, d)."""
    x = np.zeros(targets.shape[1])
    v = np.zeros_like(x)
    out = np.empty_like(targets)
    for t in range(len(targets)):
        v = v + k * (targets[t] - x) - c * v + rng.normal(0, noise, x.shape)
        x = x + v
        out[t] = x
    return out


def speech_latent(world: World, ids: np.ndarray, rng, *, jitter: float | None = None) -> np.ndarray:
    cfg = world.cfg
    dur = _durations(rng, ids, cfg, cfg.duration_sd if jitter is None else jitter)
    go = rng.integers(cfg.go_bins[0], cfg.go_bins[1] + 1)
    targets = np.concatenate([np.zeros((go, cfg.latent_dim)), np.repeat(world.mu[ids], dur, axis=0),
                              np.zeros((cfg.go_bins[0], cfg.latent_dim))])
    return _integrate(targets, cfg.stiffness, cfg.damping, cfg.process_noise, rng)


def simulate_session(world: World, session: dict, sentences: Sequence[str], blocks: Sequence[int], *,
                     task: str = "attempted", seed: int = 0) -> list[Trial]:
    """Trials of one human session. `task` is "attempted" or "imagined"; sentences too long are shortened."""
    if task not in ("attempted", "imagined"):
        raise BadInputError(f"task={task!r}: expected 'attempted' or 'imagined'")
    if len(sentences) != len(blocks):
        raise BadInputError(f"{len(sentences)} sentences but {len(blocks)} block numbers: expected one per sentence")
    cfg = world.cfg
    who = [session["participant"]] if session.get("participant") else []
    rng = np.random.default_rng([cfg.seed, 2, seed, session["day"], task == "imagined"] + who)
    w, gain, jitter = session["w"], cfg.gain, cfg.duration_sd
    if task == "imagined":
        th = cfg.imagined_rotation
        w = np.cos(th) * w + np.sin(th) * world.w_perp
        gain, jitter = cfg.gain * cfg.imagined_gain, cfg.imagined_jitter
    offsets = {blk: rng.normal(0, cfg.block_offset, cfg.channels) for blk in sorted(set(blocks))}
    trials = []
    for text, blk in zip(sentences, blocks):
        ids = phonemes.text_to_ids(text)
        x = speech_latent(world, ids, rng, jitter=jitter)
        while len(x) > cfg.max_bins:  # drop trailing words until it fits
            text = " ".join(text.split()[:-1])
            ids = phonemes.text_to_ids(text)
            x = speech_latent(world, ids, rng, jitter=jitter)
        log_rate = session["b"] + offsets[blk] + gain * session["g"] * (x @ w.T)
        rate = np.exp(log_rate) * session["alive"]
        tx = rng.poisson(rate).astype(np.float32)
        sbp = (rate / BIN_S * np.exp(rng.normal(0, cfg.sbp_noise, rate.shape)) * session["alive"]).astype(np.float32)
        trials.append(Trial(text, tx, sbp, int(blk), ids, rate.astype(np.float32)))
    return trials


def simulate_monkey(world: World, n_trials: int, *, alpha: float, seed: int = 0) -> np.ndarray:
    """Unlabelled monkey reach trials: list of tx counts (T, monkey_channels). alpha = shared dynamics in [0, 1]."""
    if not 0.0 <= alpha <= 1.0:
        raise BadInputError(f"alpha={alpha}: expected a number in [0, 1]")
    cfg = world.cfg
    rng = np.random.default_rng([cfg.seed, 3, seed])
    d = cfg.latent_dim
    w = rng.normal(size=(cfg.monkey_channels, d)) / np.sqrt(d) * (rng.random(cfg.monkey_channels) < 0.7)[:, None]
    lo, hi = np.log(np.array(cfg.rate_hz) * BIN_S)
    b = rng.uniform(lo, hi, cfg.monkey_channels)
    basis = np.linalg.qr(rng.normal(size=(d, d)))[0][:, :2]
    k = alpha * cfg.stiffness + (1 - alpha) * cfg.reach_stiffness
    c = alpha * cfg.damping + (1 - alpha) * cfg.reach_damping
    out = []
    for _ in range(n_trials):
        n_seg = rng.integers(4, 10)
        angles = rng.uniform(0, 2 * np.pi, n_seg)
        reach = 2.0 * np.stack([np.cos(angles), np.sin(angles)], 1) @ basis.T
        phones = world.mu[rng.integers(1, phonemes.NUM_CLASSES, n_seg)]
        targets = np.sqrt(alpha) * phones + np.sqrt(1 - alpha) * reach
        dur = np.maximum(np.round(np.exp(rng.normal(np.log(alpha * cfg.phone_bins + (1 - alpha) * cfg.reach_bins),
                                                    0.3, n_seg))), 1).astype(int)
        targets = np.concatenate([np.zeros((5, d)), np.repeat(targets, dur, 0)])[:cfg.max_bins]
        x = _integrate(targets, k, c, cfg.process_noise, rng)
        out.append(rng.poisson(np.exp(b + cfg.gain * (x @ w.T))).astype(np.float32))
    return out


def rate_oracle(sessions: Sequence[Sequence[Trial]]) -> dict[str, float]:
    """How much of the Poisson signal a model could learn at best: the NLL of the trials' counts under their true
    simulated rates against the best constant rate per channel and block (each live channel's mean count over the
    block's trials, fitted on the very counts it is scored on). Per block, so that the block offsets and day drift,
    which the z-scored inputs hide from the encoder, do not count as learnable signal.

    Returns per live channel-bin NLLs in nats (log y! included), `relative_gain` = 1 - true / constant, and
    `bits_per_spike` = (constant - true, summed) / (spikes x ln 2), the Neural Latents Benchmark's unit."""
    from scipy.special import gammaln

    true_sum = const_sum = spikes = cells = 0.0
    for trials in sessions:
        if any(t.rate is None for t in trials):
            raise BadInputError("rate_oracle: a trial without its true rate; expected trials from simulate_session")
        for block in sorted({t.block for t in trials}):
            y = np.concatenate([t.tx for t in trials if t.block == block]).astype(np.float64)
            lam = np.concatenate([t.rate for t in trials if t.block == block]).astype(np.float64)
            live = lam.max(0) > 0  # dead channels (rate 0, no counts) carry no signal either way
            y, lam = y[:, live], lam[:, live]
            const = np.broadcast_to(np.maximum(y.mean(0), 1e-12), y.shape)
            log_fact = gammaln(y + 1)
            true_sum += float((lam - y * np.log(lam) + log_fact).sum())
            const_sum += float((const - y * np.log(const) + log_fact).sum())
            spikes += float(y.sum())
            cells += y.size
    if not cells:
        raise BadInputError("rate_oracle: no trials; expected at least one session with trials")
    true_nll, const_nll = true_sum / cells, const_sum / cells
    return {"true_rate_nll": true_nll, "constant_rate_nll": const_nll, "relative_gain": 1.0 - true_nll / const_nll,
            "bits_per_spike": float((const_sum - true_sum) / (max(spikes, 1.0) * np.log(2.0))),
            "mean_count": spikes / cells}


# --- the real file formats ---------------------------------------------------------------------------------

def write_b2t24(path: str | pathlib.Path, trials: Sequence[Trial], *, area44_seed: int = 0) -> pathlib.Path:
    """A Brain-to-Text '24 session `.mat`: `sentenceText` (char matrix), `tx1`..`tx4` and `spikePow` (1 x N cells
    of T x 256: 128 area-6v then 128 area-44 columns), `blockIdx` (N x 1)."""
    from scipy.io import savemat

    rng = np.random.default_rng(area44_seed)
    n = len(trials)
    cells = {k: np.empty((1, n), dtype=object) for k in ("tx1", "tx2", "tx3", "tx4", "spikePow")}
    for i, tr in enumerate(trials):
        t, c = tr.tx.shape
        area44 = rng.poisson(0.2, (t, 128)).astype(np.float32)
        tx = np.concatenate([tr.tx[:, :128], area44], 1) if c >= 128 else np.concatenate(
            [tr.tx, np.zeros((t, 128 - c), np.float32), area44], 1)
        sbp = np.concatenate([tr.sbp[:, :128] if c >= 128 else np.pad(tr.sbp, ((0, 0), (0, 128 - c))),
                              area44 * 10.0], 1)
        thin = tx
        for j, key in enumerate(("tx1", "tx2", "tx3", "tx4")):
            if j:
                thin = rng.binomial(thin.astype(np.int64), 0.6).astype(np.float32)
            cells[key][0, i] = np.minimum(thin, 255).astype(np.uint8)
        cells["spikePow"][0, i] = sbp.astype(np.float32)
    width = max(len(tr.text) for tr in trials) if trials else 1
    text = np.array([tr.text.ljust(width) for tr in trials], dtype=f"<U{width}")
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    savemat(path, {"sentenceText": text, **cells,
                   "blockIdx": np.array([[tr.block] for tr in trials], np.float64)}, do_compression=True)
    return path


def write_b2t25(path: str | pathlib.Path, trials: Sequence[Trial], *, session: str = "t15.2023.08.11") -> pathlib.Path:
    """A Brain-to-Text '25 session hdf5: groups `trial_%04d` with `input_features` (T x 512: 256 tx then 256
    sbp, normalised per block), `seq_class_ids` (500, zero-padded), `transcription` (500 ascii codes) and attrs
    `n_time_steps`, `seq_len`, `block_num`, `trial_num`, `session`, `sentence_label`."""
    import h5py

    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    feats = []
    for tr in trials:
        c = tr.tx.shape[1]
        pad = lambda a: np.pad(a, ((0, 0), (0, 256 - c))) if c < 256 else a[:, :256]  # noqa: E731
        feats.append(np.concatenate([pad(tr.tx), pad(np.log1p(tr.sbp))], 1).astype(np.float32))
    # normalise per block (the '25 release is already normalised)
    by_block: dict[int, list[int]] = {}
    for i, tr in enumerate(trials):
        by_block.setdefault(tr.block, []).append(i)
    for idx in by_block.values():
        cat = np.concatenate([feats[i] for i in idx])
        mean, std = cat.mean(0), cat.std(0) + 1e-6
        for i in idx:
            feats[i] = (feats[i] - mean) / std
    with h5py.File(path, "w") as f:
        for i, (tr, x) in enumerate(zip(trials, feats)):
            g = f.create_group(f"trial_{i:04d}")
            g.create_dataset("input_features", data=x)
            ids = np.zeros(500, np.int32)
            ids[:len(tr.phone_ids)] = tr.phone_ids
            g.create_dataset("seq_class_ids", data=ids)
            codes = np.zeros(500, np.int32)
            codes[:len(tr.text)] = [ord(ch) for ch in tr.text]
            g.create_dataset("transcription", data=codes)
            g.attrs.update({"n_time_steps": x.shape[0], "seq_len": len(tr.phone_ids), "block_num": tr.block,
                            "trial_num": i, "session": session, "sentence_label": tr.text})
    return path
