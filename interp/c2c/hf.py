"""The `paper` preset's path: a receiver and a sharer from local HuggingFace folders with different
tokenizers (Qwen3-0.6B and Qwen2.5-0.5B-Instruct), the fuser trained on locally generated instruction data.

Cross-tokenizer alignment: each receiver token's text is re-tokenized by the sharer; it maps to one sharer
token, the first of them (`first`) or the one with the longest text (`longest`). The sharer then prefills the
aligned sequence, which has the receiver's length, at the receiver's positions, so the two caches line up
slot by slot (the reference aligner's two strategies; its finer section bookkeeping is not reproduced).

Not run in this project (no GPU, no weights): `run_hf` is exercised only on tiny random-init folders.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from core.config import BadInputError
from core.lm.tokenizer import Tokenizer, chat_format, load_tokenizer
from core.lm.weights import check_hf_folder, load_hf
from interp.c2c import communicate as comm
from interp.c2c.configs import ALIGN_STRATEGIES, C2CConfig


def align_tokens(receiver_ids: Sequence[int], receiver_tok: Tokenizer, sharer_tok: Tokenizer,
                 strategy: str = "first") -> list[int]:
    """One sharer token per receiver token (the same length): the receiver token's text re-encoded by the
    sharer, then its first token or its longest-text token. A text the sharer encodes to nothing maps to the
    sharer's pad/eos id."""
    if strategy not in ALIGN_STRATEGIES:
        raise BadInputError(f"align_strategy={strategy!r}: expected one of {ALIGN_STRATEGIES}")
    fallback = sharer_tok.pad_id if sharer_tok.pad_id is not None else (sharer_tok.eos_id or 0)
    out = []
    for t in receiver_ids:
        text = receiver_tok.decode([int(t)], skip_special_tokens=False)
        special = sharer_tok.tok.token_to_id(text)  # a token both vocabularies spell alike (e.g. <|im_start|>)
        ids = [special] if special is not None else sharer_tok.encode(text)
        if not ids:
            out.append(int(fallback))
        elif strategy == "first":
            out.append(int(ids[0]))
        else:
            lengths = [len(sharer_tok.decode([i], skip_special_tokens=False)) for i in ids]
            out.append(int(ids[int(np.argmax(lengths))]))
    return out


def instruction_data(n: int, seed: int) -> list[tuple[str, str]]:
    """Locally generated (instruction, response) pairs: arithmetic, word lists, unit facts (no download)."""
    rng = np.random.default_rng(seed)
    words = ("apple", "river", "stone", "cloud", "lamp", "forest", "violet", "engine", "harbor", "copper")
    out = []
    for _ in range(n):
        kind = int(rng.integers(0, 4))
        if kind == 0:
            a, b = (int(x) for x in rng.integers(2, 99, 2))
            out.append((f"What is {a} plus {b}? Answer with the number only.", str(a + b)))
        elif kind == 1:
            a, b = (int(x) for x in rng.integers(2, 12, 2))
            out.append((f"What is {a} times {b}? Answer with the number only.", str(a * b)))
        elif kind == 2:
            picks = list(rng.choice(words, 3, replace=False))
            out.append((f"Which word comes first alphabetically: {', '.join(picks)}?", min(picks)))
        else:
            picks = list(rng.choice(words, 3, replace=False))
            out.append((f"Repeat the last word of this list: {', '.join(picks)}.", picks[-1]))
    return out


def encode_pairs(pairs, receiver_tok: Tokenizer, sharer_tok: Tokenizer, strategy: str):
    """Receiver prompt tokens (chat template + generation prompt), aligned sharer tokens, answer tokens."""
    out = []
    for instruction, response in pairs:
        prompt = receiver_tok.encode(chat_format([{"role": "user", "content": instruction}]))
        answer = receiver_tok.encode(response)
        if receiver_tok.eos_id is not None:
            answer = answer + [receiver_tok.eos_id]
        out.append((prompt, align_tokens(prompt, receiver_tok, sharer_tok, strategy), answer))
    return out


def run_hf(config: C2CConfig) -> dict:
    """Load both folders, align, train the fuser on generated instructions, report held-out first-answer-token
    accuracy of the receiver alone and of C2C. Needs the weights (and, at this size, a GPU)."""
    from core import train as train_lib
    from interp.c2c.fuser import init_fuser
    from interp.c2c.train import fuser_batch, make_fuser_step

    t0 = time.time()
    for role, path in (("receiver_path", config.receiver_path), ("sharer_path", config.sharer_path)):
        check_hf_folder(path, role)
    r_cfg, r_gd, r_params = load_hf(config.receiver_path)
    s_cfg, s_gd, s_params = load_hf(config.sharer_path)
    r_tok, s_tok = load_tokenizer(config.receiver_path), load_tokenizer(config.sharer_path)
    pairs = encode_pairs(instruction_data(config.instruction_samples, config.seed), r_tok, s_tok,
                         config.align_strategy)
    n_test = max(len(pairs) // 100, 8)  # the reference's 99/1 split
    train_pairs, test_pairs = pairs[n_test:], pairs[:n_test]
    f_gd, f_params = init_fuser(s_cfg, r_cfg, config.fuser, jax.random.key(config.seed))
    pair = comm.Pair(receiver=r_cfg, receiver_graphdef=r_gd, sharer=s_cfg, sharer_graphdef=s_gd, fuser=config.fuser,
                     fuser_graphdef=f_gd)
    arrays = _sections(pair, r_params, s_params, train_pairs)
    tx, step = make_fuser_step(pair, config.fuser)
    state = train_lib.init_train_state(f_params, tx, jax.random.key(config.seed + 1),
                                       frozen={"receiver": r_params, "sharer": s_params})
    rng = np.random.default_rng(config.seed)
    for i in train_lib.progress(range(config.fuser.steps), desc="fuser"):
        idx = rng.choice(len(train_pairs), min(config.fuser.batch_size, len(train_pairs)), replace=False)
        state, _ = step(state, fuser_batch(arrays, idx, i))
    test = _sections(pair, r_params, s_params, test_pairs)
    return {"receiver_alone": _first_token_accuracy(pair, None, r_params, s_params, test),
            "c2c": _first_token_accuracy(pair, state.params, r_params, s_params, test),
            "train_examples": len(train_pairs), "test_examples": n_test, "wall_seconds": time.time() - t0}


def _sections(pair, r_params, s_params, encoded, response_tokens: int = 2) -> dict[str, np.ndarray]:
    """Section caches of both models (receiver tokens for the receiver, aligned ones for the sharer) and the
    first `response_tokens` response inputs / targets, as `train.precompute_sections` lays them out."""
    from interp.c2c.data import left_pad
    r_tokens, mask = left_pad([p[:-1] for p, _, _ in encoded])
    s_tokens, _ = left_pad([s[:-1] for _, s, _ in encoded])
    seqs = [[p[-1], *a] for p, _, a in encoded]
    inputs = np.asarray([s[:response_tokens] for s in seqs], np.int32)
    targets = np.asarray([s[1:response_tokens + 1] for s in seqs], np.int32)
    fn = jax.jit(comm.section_caches, static_argnames=("pair", "extra_slots"))
    rc, sc = fn(pair, r_params, s_params, r_tokens, mask, extra_slots=0, sharer_tokens=s_tokens)
    return {"receiver_k": np.moveaxis(np.asarray(rc.k), 0, 1), "receiver_v": np.moveaxis(np.asarray(rc.v), 0, 1),
            "sharer_k": np.moveaxis(np.asarray(sc.k), 0, 1), "sharer_v": np.moveaxis(np.asarray(sc.v), 0, 1),
            "mask": mask, "inputs": inputs, "targets": targets}


def _first_token_accuracy(pair, f_params, r_params, s_params, arrays) -> float:
    batch = jax.tree.map(jnp.asarray, {k: arrays[k] for k in arrays})
    rc = comm._cache_from(batch["receiver_k"], batch["receiver_v"], batch["mask"], batch["inputs"].shape[1])
    sc = comm._cache_from(batch["sharer_k"], batch["sharer_v"], batch["mask"], batch["inputs"].shape[1])
    if f_params is not None:
        rc, _ = comm.fuse_slots(pair, f_params, sc, rc, 0, batch["mask"].shape[1], batch["mask"])
    logits = comm.respond(pair, f_params, r_params, s_params, rc, sc, batch["inputs"])
    return float(jnp.mean(jnp.argmax(logits[:, 0], -1) == batch["targets"][:, 0]))
