"""Word-level decoding: a lexicon-constrained CTC beam search (flashlight-text's LexiconDecoder) over the
phoneme log-probs, with a word n-gram LM queried through real KenLM; and the greedy baseline (best path,
split at SIL, nearest lexicon word by phone edit distance)."""

from __future__ import annotations

import math
import pathlib
from collections.abc import Sequence

import numpy as np

from bit import phonemes

LN10 = math.log(10.0)


def _edit(a: Sequence[int], b: Sequence[int]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


class Lexicon:
    """Words and their phone-id spellings (first CMU pronunciation, or the one in `extra`)."""

    def __init__(self, words: Sequence[str], extra: phonemes.Pronunciations | None = None):
        self.words = sorted(set(words))
        if not self.words:
            raise ValueError("empty word list: expected at least one lexicon word")
        self.spell = {w: [phonemes.PHONE_ID[p] for p in phonemes.word_phones(w, extra)] for w in self.words}
        self.dropped_sentences = 0  # LM sentences left out for a word with no pronunciation (see lm_corpus)

    def nearest(self, ids: Sequence[int]) -> str:
        return min(self.words, key=lambda w: (_edit(ids, self.spell[w]), w))

    def oov_rate(self, texts: Sequence[str]) -> float:
        """Fraction of the (normalised) words of `texts` outside the lexicon: words the cascade cannot emit, each
        a sure error in the WER (they stay in the references, as in the official scoring)."""
        words = [w for t in texts for w in phonemes.normalise(t)]
        return sum(w not in self.spell for w in words) / max(len(words), 1)


def lm_corpus(texts: Sequence[str], extra: phonemes.Pronunciations | None = None
              ) -> tuple[list[list[str]], Lexicon]:
    """The word LM's sentences and the decoder's lexicon, as the official recipe builds them
    (nejm-brain-to-text `format_lm_data.py`): a sentence with any word that has no pronunciation is left out of
    the LM text (not kept with that word deleted), and the lexicon is every word of the sentences kept. The
    count left out is `lexicon.dropped_sentences`."""
    kept = [ws for ws in (phonemes.normalise(t) for t in texts) if ws and not any(
        not phonemes.has_pronunciation(w, extra) for w in ws)]
    lexicon = Lexicon([w for ws in kept for w in ws], extra)
    lexicon.dropped_sentences = sum(1 for t in texts if phonemes.normalise(t)) - len(kept)
    return kept, lexicon


def greedy_words(phone_ids: Sequence[int], lexicon: Lexicon) -> str:
    """Split a phone sequence at SIL and map each chunk to its nearest lexicon word."""
    words, chunk = [], []
    for i in list(phone_ids) + [phonemes.SIL]:
        if i == phonemes.SIL:
            if chunk:
                words.append(lexicon.nearest(chunk))
            chunk = []
        else:
            chunk.append(int(i))
    return " ".join(words)


class WordDecoder:
    """flashlight LexiconDecoder + a KenLM word model (ARPA written by bit.ngram)."""

    def __init__(self, lexicon: Lexicon, arpa: str | pathlib.Path, *, beam: int = 50, lm_weight: float = 1.0,
                 word_score: float = 0.0, sil_score: float = 0.0, beam_threshold: float = 25.0):
        import kenlm
        from flashlight.lib.text.decoder import (
            LM,
            CriterionType,
            LexiconDecoder,
            LexiconDecoderOptions,
            LMState,
            SmearingMode,
            Trie,
        )

        self.lexicon = lexicon
        self.kenlm = kenlm.Model(str(arpa))
        self.index = {w: i for i, w in enumerate(lexicon.words)}
        self.unk = len(lexicon.words)
        outer = self

        class KenLM(LM):  # the python LM interface: states are LMState children keyed by word index
            def __init__(self):
                LM.__init__(self)
                self.states = {}

            def start(self, start_with_nothing):
                state = LMState()
                ks = kenlm.State()
                if start_with_nothing:
                    outer.kenlm.NullContextWrite(ks)
                else:
                    outer.kenlm.BeginSentenceWrite(ks)
                self.states[state] = ks
                return state

            def score(self, state, token_index):  # cache: child LMState -> (kenlm state, ln score)
                ks_in = self.states[state]
                ks_in = ks_in[0] if isinstance(ks_in, tuple) else ks_in
                out = state.child(token_index)
                if out not in self.states:
                    ks = kenlm.State()
                    word = outer.lexicon.words[token_index] if token_index < outer.unk else "<unk>"
                    self.states[out] = (ks, outer.kenlm.BaseScore(ks_in, word, ks) * LN10)
                return out, self.states[out][1]

            def finish(self, state):
                ks_in = self.states[state]
                ks_in = ks_in[0] if isinstance(ks_in, tuple) else ks_in
                ks = kenlm.State()
                s = outer.kenlm.BaseScore(ks_in, "</s>", ks)
                return state.child(-1), s * LN10

        self.lm = KenLM()
        self.trie = Trie(phonemes.NUM_CLASSES, phonemes.SIL)
        start = self.lm.start(False)
        for w, i in self.index.items():
            _, score = self.lm.score(start, i)
            self.trie.insert(lexicon.spell[w], i, score)
        self.trie.smear(SmearingMode.MAX)
        self._options = dict(beam_size=beam, beam_size_token=phonemes.NUM_CLASSES, beam_threshold=beam_threshold,
                             unk_score=-math.inf, sil_score=sil_score, log_add=False,
                             criterion_type=CriterionType.CTC)
        self._make = lambda **w: LexiconDecoder(LexiconDecoderOptions(**self._options, **w), self.trie, self.lm,
                                                phonemes.SIL, phonemes.BLANK, self.unk, [], False)
        self.set_weights(lm_weight, word_score)

    def set_weights(self, lm_weight: float, word_score: float) -> None:
        """Swap the LM weight and the word insertion score (the trie and the KenLM model are kept)."""
        self.lm_weight, self.word_score = float(lm_weight), float(word_score)
        self.decoder = self._make(lm_weight=self.lm_weight, word_score=self.word_score)

    def decode(self, logp: np.ndarray, frames: int) -> str:
        """(T, 41) log-probs, of which the first `frames` are real -> the best word sequence."""
        em = np.ascontiguousarray(np.asarray(logp[:frames], np.float32))
        result = self.decoder.decode(em.ctypes.data, em.shape[0], em.shape[1])[0]
        # -1 marks no word; the unknown word (never emitted: unk_score is -inf) would be written as <unk>
        return " ".join(self.lexicon.words[i] if i < self.unk else "<unk>" for i in result.words if i >= 0)


def tune_weights(decoder: WordDecoder, logprobs: np.ndarray, frames: np.ndarray, texts: Sequence[str], *,
                 lm_weights: Sequence[float] = (0.3, 0.5, 1.0), word_scores: Sequence[float] = (0.0, 2.0)
                 ) -> dict:
    """Pick the LM weight and word score with the lowest WER on held-out (validation) sentences, as a cascade
    is tuned before it is tested, and leave `decoder` set to them. Returns the choice and every grid WER."""
    from bit import metrics

    if not len(texts):
        raise ValueError("tune_weights: no validation sentences; expected at least one")
    grid = {}
    for lw in lm_weights:
        for ws in word_scores:
            decoder.set_weights(lw, ws)
            hyps = [decoder.decode(logprobs[i], frames[i]) for i in range(len(texts))]
            grid[(lw, ws)] = metrics.wer(list(texts), hyps)
    lw, ws = min(grid, key=lambda k: (grid[k], k))  # ties: the smaller LM weight
    decoder.set_weights(lw, ws)
    return {"lm_weight": lw, "word_score": ws, "valid_wer": grid[(lw, ws)],
            "grid": [{"lm_weight": a, "word_score": b, "valid_wer": w} for (a, b), w in grid.items()]}
