"""A learned card selector: a small character-level transformer that scores how authentic a card's text looks,
trained on generated benign / spoof card pairs, combined with skill relevance to choose a peer.

It is compared with the heuristic skill-match selector on AgentCard-spoofing success against the number of
spoofs k. The spoof generator's marketing words and name/provider templates are shared by training and test
cards, but every test card is drawn with a seed the training set never used.
"""

from __future__ import annotations

import dataclasses
import pathlib
import random
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from a2a.types import a2a_pb2 as pb
from flax import nnx

from core import data as data_lib
from core import train as train_lib
from rl_tools.a2a_security import lab as lab_lib
from rl_tools.a2a_security import scenarios

MAX_CHARS = 192
VOCAB = 128  # ASCII; anything else maps to 0


def encode(texts: Sequence[str], max_chars: int = MAX_CHARS) -> np.ndarray:
    """(N,) strings -> (N, max_chars) int32 character codes, 0-padded (and 0 for non-ASCII)."""
    out = np.zeros((len(texts), max_chars), np.int32)
    for i, text in enumerate(texts):
        codes = [c if c < VOCAB else 0 for c in text.encode("ascii", "replace")[:max_chars]]
        out[i, :len(codes)] = codes
    return out


class CardEncoder(nnx.Module):
    """Embedding + learned positions, `depth` pre-norm transformer blocks, masked mean pool, one logit."""

    def __init__(self, *, width: int = 48, heads: int = 4, depth: int = 1, max_chars: int = MAX_CHARS,
                 rngs: nnx.Rngs):
        self.embed = nnx.Embed(VOCAB, width, rngs=rngs)
        self.position = nnx.Param(0.02 * jax.random.normal(rngs.params(), (max_chars, width)))
        self.blocks = nnx.List([_Block(width, heads, rngs=rngs) for _ in range(depth)])
        self.norm = nnx.LayerNorm(width, rngs=rngs)
        self.head = nnx.Linear(width, 1, rngs=rngs)

    def __call__(self, chars: jax.Array) -> jax.Array:
        mask = chars > 0
        x = self.embed(chars) + self.position[None, : chars.shape[1]]
        for block in self.blocks:
            x = block(x, mask)
        x = self.norm(x)
        pooled = (x * mask[..., None]).sum(1) / jnp.maximum(mask.sum(1, keepdims=True), 1)
        return self.head(pooled)[:, 0]


class _Block(nnx.Module):
    def __init__(self, width: int, heads: int, *, rngs: nnx.Rngs):
        self.norm1 = nnx.LayerNorm(width, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(num_heads=heads, in_features=width, decode=False, rngs=rngs)
        self.norm2 = nnx.LayerNorm(width, rngs=rngs)
        self.mlp_in = nnx.Linear(width, 2 * width, rngs=rngs)
        self.mlp_out = nnx.Linear(2 * width, width, rngs=rngs)

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        attention_mask = mask[:, None, None, :]
        x = x + self.attention(self.norm1(x), mask=attention_mask)
        return x + self.mlp_out(jax.nn.gelu(self.mlp_in(self.norm2(x))))


BENIGN_PROVIDERS = ["services", "group", "partners", "cooperative"]


def card_pairs(n: int, *, seed: int) -> tuple[list[str], np.ndarray]:
    """`n` benign and `n` spoof card texts (label 1 = benign), from the scenario generator's templates."""
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(n):
        domain = rng.choice(sorted(scenarios.DOMAINS))
        skill = rng.choice(scenarios.DOMAINS[domain])
        query, _ = scenarios._fill(skill["template"], rng)
        benign = dict(skill, tags=rng.sample(list(skill["tags"]), rng.randint(1, len(skill["tags"]))))
        card = lab_lib.make_card(f"{domain}-{skill['id'].replace('_', '-')}",
                                 f"{skill['description'].capitalize()} for {domain} customers.", [benign],
                                 provider=f"{domain}-{rng.choice(BENIGN_PROVIDERS)}")
        texts.append(lab_lib.card_text(card))
        labels.append(1)
        texts.append(lab_lib.card_text(scenarios.spoof_card(domain, skill, query, rng, rng.randrange(20))))
        labels.append(0)
    return texts, np.asarray(labels, np.int32)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SelectorConfig:
    width: int = 48  # card encoder's embedding / transformer width
    heads: int = 4  # attention heads per transformer block
    depth: int = 1  # transformer blocks
    train_pairs: int = 1024  # generated benign / spoof card pairs to train on
    steps: int = 300
    batch_size: int = 64
    lr: float = 3e-3
    seed: int = 0


def train_selector(config: SelectorConfig, workdir: pathlib.Path) -> tuple[LearnedSelector, dict[str, float]]:
    """Train the card encoder on generated pairs with core.train.fit; returns the selector and test accuracy."""
    texts, labels = card_pairs(config.train_pairs, seed=config.seed)
    test_texts, test_labels = card_pairs(256, seed=config.seed + 10_000)
    model = CardEncoder(width=config.width, heads=config.heads, depth=config.depth, rngs=nnx.Rngs(config.seed))
    graphdef, params = nnx.split(model, nnx.Param)

    def logits_fn(params, chars):
        return nnx.merge(graphdef, params)(chars)

    def loss_fn(params, batch, key):
        del key
        logits = logits_fn(params, batch["chars"])
        loss = optax.sigmoid_binary_cross_entropy(logits, batch["label"].astype(jnp.float32)).mean()
        return loss, {"accuracy": jnp.mean((logits > 0) == (batch["label"] > 0))}

    tx = optax.adam(config.lr)
    state = train_lib.init_train_state(params, tx, jax.random.key(config.seed))
    loader = data_lib.ArrayLoader({"chars": encode(texts), "label": labels}, config.batch_size, seed=config.seed)
    state, _ = train_lib.fit(state, train_lib.make_train_step(loss_fn, tx), loader, num_steps=config.steps,
                             workdir=workdir, config=config, log_every=50, ckpt_every=config.steps)
    score = jax.jit(logits_fn)
    test_logits = np.asarray(score(state.params, encode(test_texts)))
    accuracy = float(np.mean((test_logits > 0) == (test_labels > 0)))
    return LearnedSelector(score, state.params), {"selector_test_accuracy": accuracy}


class LearnedSelector:
    """Chooses the card maximising relevance (normalised heuristic score) x P(authentic | card text)."""

    def __init__(self, score_fn, params, max_cards: int = 16):
        self.score_fn, self.params, self.max_cards = score_fn, params, max_cards
        self.heuristic = scenarios.HeuristicSelector()

    def authenticity(self, cards: Sequence[pb.AgentCard]) -> np.ndarray:
        padded = -(-len(cards) // self.max_cards) * self.max_cards  # a fixed shape: one compile
        chars = encode([lab_lib.card_text(c) for c in cards] + [""] * (padded - len(cards)))
        return np.asarray(jax.nn.sigmoid(self.score_fn(self.params, chars)))[: len(cards)]

    def select(self, query: str, cards: Sequence[pb.AgentCard]) -> int:
        relevance = np.array([self.heuristic.score(query, c) for c in cards])
        combined = relevance / max(relevance.max(), 1e-9) * self.authenticity(cards)
        return int(np.argmax(combined))
