"""Data of the end-to-end stage: the tokenizer, text rows for LM pretraining, simulated speech for the
audio-LLM analogue, and the padded (prefix, prompt, sentence) rows every stage trains on.

A row is `[open] prefix (P continuous tokens, padded ones masked) [close] prompt sentence [eos]`: the prefix is
the projected neural tokens (`<neural>` ... `</neural>`, the paper's delimiters) or the projected speech frames
(`<speech>` ... `</speech>`); the loss is on the sentence and its end token only.

Simulated speech: the phones of a sentence get lognormal durations (the neural simulator's phone-timing model),
each 20 ms bin carries its phone's fixed random embedding, and one frame per encoder patch (5 bins) is the mean
of its bins plus white noise: a continuous, noisy, phone-rate sequence at the rate of the neural tokens, as an
audio encoder's output is for an audio LLM.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bit import phonemes
from bit.e2e.configs import PROMPT, SPEECH_PROMPT, LanguageModelConfig
from core.config import BadInputError
from core.lm.tokenizer import BOS, DEFAULT_SPECIALS, EOS, PAD, Tokenizer, load_tokenizer, train_bpe

NEURAL_OPEN, NEURAL_CLOSE = "<neural>", "</neural>"
SPEECH_OPEN, SPEECH_CLOSE = "<speech>", "</speech>"
SPECIALS = (*DEFAULT_SPECIALS, NEURAL_OPEN, NEURAL_CLOSE, SPEECH_OPEN, SPEECH_CLOSE)


def build_tokenizer(lm: LanguageModelConfig, texts: Sequence[str]) -> Tokenizer:
    """Byte-level BPE over the LM text and both prompts (the delimiters are special tokens), or the tokenizer of
    the local LM folder (`lm.path`), where a delimiter it lacks is spelled in ordinary tokens."""
    if lm.path:
        return load_tokenizer(lm.path)
    return train_bpe([*texts, PROMPT, SPEECH_PROMPT], vocab_size=lm.vocab_size, specials=SPECIALS)


def encode_sentences(tok: Tokenizer, texts: Sequence[str], length: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded (B, length) ids of each sentence followed by the end token, and their mask. A sentence
    longer than `length - 1` tokens is an error naming it (raise `decode.max_new_tokens` / the row length)."""
    ids = np.full((len(texts), length), tok.pad_id, np.int32)
    mask = np.zeros((len(texts), length), bool)
    for i, text in enumerate(texts):
        row = tok.encode(text) + [tok.eos_id]
        if len(row) > length:
            raise BadInputError(f"sentence {text!r}: {len(row)} tokens with the end token; expected at most {length}")
        ids[i, :len(row)] = row
        mask[i, :len(row)] = True
    return ids, mask


def sentence_length(tok: Tokenizer, texts: Sequence[str], multiple: int = 4) -> int:
    """Tokens of the longest sentence plus its end token, rounded up (one compile serves every batch)."""
    longest = max(len(tok.encode(t)) for t in texts) + 1
    return -(-longest // multiple) * multiple


def text_rows(tok: Tokenizer, texts: Sequence[str], length: int) -> dict[str, np.ndarray]:
    """Next-token rows `<s> sentence </s>` for LM pretraining (core.lm.losses.next_token_loss's batch)."""
    bos = tok.token_to_id(BOS)
    ids, mask = encode_sentences(tok, texts, length - 1)
    seq = np.concatenate([np.full((len(texts), 1), bos, np.int32), ids], 1)
    seg = np.concatenate([np.ones((len(texts), 1), np.int32), mask.astype(np.int32)], 1)
    return {"inputs": seq[:, :-1], "targets": seq[:, 1:], "loss_mask": mask.astype(np.float32),
            "segment_ids": seg[:, :-1]}


def phone_table(lm: LanguageModelConfig, seed: int = 0) -> np.ndarray:
    """Each phone class's fixed unit-variance embedding (41, speech_dim); blank's row is 0 (rest)."""
    table = np.random.default_rng([seed, 41]).normal(size=(phonemes.NUM_CLASSES, lm.speech_dim))
    table[phonemes.BLANK] = 0.0
    return table.astype(np.float32)


def speech_frames(phone_ids: np.ndarray, table: np.ndarray, rng: np.random.Generator, *, patch: int,
                  frames: int, phone_bins: float, sil_bins: tuple[int, int], jitter: float, noise: float
                  ) -> tuple[np.ndarray, int]:
    """Simulated speech of one sentence: (frames, speech_dim) float32 and its valid frame count. Trailing phones
    that do not fit in `frames * patch` bins are cut, as the neural simulator cuts trailing words."""
    dur = np.exp(rng.normal(np.log(phone_bins), jitter, len(phone_ids)))
    sil = rng.integers(sil_bins[0], sil_bins[1] + 1, len(phone_ids))
    dur = np.maximum(np.where(phone_ids == phonemes.SIL, sil, np.round(dur)), 1).astype(int)
    onset = rng.integers(1, patch + 1)  # a short rest before speech, as the go delay
    bins = np.concatenate([np.zeros(onset, int), np.repeat(phone_ids, dur)])[:frames * patch]
    n = -(-len(bins) // patch)
    x = np.zeros((frames, table.shape[1]), np.float32)
    padded = np.pad(bins, (0, n * patch - len(bins)))
    x[:n] = table[padded].reshape(n, patch, -1).mean(1) + noise * rng.normal(size=(n, table.shape[1]))
    return x, n


def speech_batch(texts: Sequence[str], table: np.ndarray, rng: np.random.Generator, *, lm: LanguageModelConfig,
                 patch: int, frames: int, phone_bins: float, sil_bins: tuple[int, int]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Frames (B, frames, speech_dim) and their validity mask (B, frames) for a batch of sentences."""
    xs, masks = [], []
    for text in texts:
        x, n = speech_frames(phonemes.text_to_ids(text), table, rng, patch=patch, frames=frames,
                             phone_bins=phone_bins, sil_bins=sil_bins, jitter=lm.speech_jitter, noise=lm.speech_noise)
        xs.append(x)
        masks.append(np.arange(frames) < n)
    return np.stack(xs), np.stack(masks)


def delimiter_ids(tok: Tokenizer, modality: str) -> tuple[np.ndarray, np.ndarray]:
    """(open, close) token ids of `modality` "neural" or "speech": one special token each in a tokenizer trained
    here, the text of the tag in a loaded one that lacks it."""
    pair = {"neural": (NEURAL_OPEN, NEURAL_CLOSE), "speech": (SPEECH_OPEN, SPEECH_CLOSE)}[modality]
    ids = [[tok.tok.token_to_id(t)] if tok.tok.token_to_id(t) is not None else tok.encode(t) for t in pair]
    return np.asarray(ids[0], np.int32), np.asarray(ids[1], np.int32)


def prompt_ids(tok: Tokenizer, modality: str) -> np.ndarray:
    """The instruction after the closing delimiter: the paper's for neural activity, its twin for speech."""
    return np.asarray(tok.encode(PROMPT if modality == "neural" else SPEECH_PROMPT), np.int32)


__all__ = ["BOS", "EOS", "PAD", "NEURAL_OPEN", "NEURAL_CLOSE", "SPEECH_OPEN", "SPEECH_CLOSE", "SPECIALS",
           "build_tokenizer", "delimiter_ids", "encode_sentences", "phone_table", "prompt_ids", "sentence_length",
           "speech_batch", "speech_frames", "text_rows"]


def paired_imagined(base, data: dict, workdir) -> dict:
    """The target participant's test sentences recorded a second time as imagined speech, on the sessions that
    record imagined speech (the first `data.imagined_sessions`), written in `data.layout` and read back like the
    rest: {"attempted": the test trials' rows, "imagined": the new trials (same sentences, same sessions, same
    order), "texts"}. What the attempted-imagined alignment is measured on (simulated data only)."""
    import pathlib

    from bit import data as cascade_data
    from bit import sessions, simulate

    d, sim = base.data, base.sim
    per, n_sess = d.test_per_session, min(d.imagined_sessions, d.sessions)
    if base.data.data_dir or n_sess == 0:
        raise BadInputError(f"data.imagined_sessions={d.imagined_sessions}, data.data_dir={d.data_dir!r}: the "
                            "attempted-imagined pairs need simulated sessions with imagined speech")
    world = simulate.World(sim)
    days = simulate.participant_days(0, d.sessions)
    session_params = world.sessions(days, seed=d.seed)
    root = pathlib.Path(workdir) / "data"
    loaded, ids = [], []
    for i in range(n_sess):
        texts = data["test_text"][i * per:(i + 1) * per]
        trials = simulate.simulate_session(world, session_params[i], texts, [90 + j // 20 for j in range(per)],
                                           task="imagined", seed=d.seed + 101)
        loaded.append(sessions.write_and_load(trials, root / f"t15_day{days[i]:03d}_imagined_pairs", d.layout, i))
        ids.append(i)
    f, c = sessions.feature_sizes(base)
    imagined = sessions.smooth(cascade_data.pad_trials(loaded, ids, max_bins=sim.max_bins, num_features=f,
                                                       num_counts=c, patch=base.model.patch, max_labels=64),
                               d.smooth_sd)
    n = n_sess * per
    texts = [t for s in loaded for t in s.texts]
    same = np.flatnonzero([a == b for a, b in zip(texts, data["test_text"][:n])])  # imagined speech is slower:
    # a sentence the simulator had to shorten to fit data.max_bins is no longer a pair
    return {"attempted": {k: v[same] for k, v in data["test"].items()},
            "imagined": {k: v[same] for k, v in imagined.items()}, "texts": [texts[i] for i in same]}
