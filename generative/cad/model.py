"""The requirement-aware mechanism's tagger (RAM, PTA's "extracts dimensions and geometric relations"): a small
nnx network labelling every instruction word with the requirement role it states (or none).

The planner, the actioner and the direct baseline are `core.lm` decoders (model.init / generate), built in
`train.py`; this module holds only what PTA adds to them.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from core.lm import model as model_lib
from generative.cad import corpus
from generative.cad import tokens as tokens_lib


class RequirementTagger(nnx.Module):
    """logits (B, T, 1 + n_roles) from word ids (B, T).

    Two views of each word: a window of the word and its `window - 1` predecessors (roles are named just
    before their number: "radius 5", "notch width 22"), and one causal self-attention layer over the whole
    instruction so far (which feature the number belongs to: "hole radius 5 at x 2" vs "boss ... at x 2").
    """

    def __init__(self, vocab: int, *, dim: int = 48, hidden: int = 128, window: int = 3, heads: int = 4,
                 max_len: int = 64, n_tags: int = 1 + len(corpus.ROLES), rngs: nnx.Rngs):
        self.window = window
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)
        self.position = nnx.Embed(max_len, dim, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(num_heads=heads, in_features=dim, qkv_features=dim, decode=False,
                                                rngs=rngs)
        self.hidden = nnx.Linear((window + 1) * dim, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, n_tags, rngs=rngs)

    def __call__(self, ids: jax.Array) -> jax.Array:
        e = self.embed(ids)  # (B, T, D)
        T = ids.shape[1]
        causal = nnx.make_causal_mask(ids)
        context = self.attention(e + self.position(jnp.arange(T))[None], mask=causal)
        shifted = [jnp.pad(e, ((0, 0), (k, 0), (0, 0)))[:, :T] for k in range(self.window)]
        return self.out(jax.nn.gelu(self.hidden(jnp.concatenate([*shifted, context], -1))))


def tagger_loss(params, graphdef, batch):
    logits = nnx.merge(graphdef, params)(batch["ids"])
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
    return jnp.sum(ce * batch["mask"]) / jnp.maximum(jnp.sum(batch["mask"]), 1.0)


def train_tagger(arrays: dict, *, vocab: int, steps: int, batch_size: int, lr: float, key: jax.Array
                 ) -> tuple[nnx.GraphDef, nnx.State, jax.Array]:
    """The whole loop in one jit (lax.scan over steps, a random minibatch per step); returns the losses."""
    init_key, data_key = jax.random.split(key)
    graphdef, params = nnx.split(RequirementTagger(vocab, rngs=nnx.Rngs(params=init_key)), nnx.Param)
    tx = optax.adam(lr)
    data = {k: jnp.asarray(v) for k, v in arrays.items()}
    n = data["ids"].shape[0]

    def step(carry, k):
        params, opt = carry
        idx = jax.random.randint(jax.random.fold_in(data_key, k), (min(batch_size, n),), 0, n)
        loss, grads = jax.value_and_grad(tagger_loss)(params, graphdef, jax.tree.map(lambda x: x[idx], data))
        updates, opt = tx.update(grads, opt, params)
        return (optax.apply_updates(params, updates), opt), loss

    @jax.jit
    def run(params):
        (params, _), losses = jax.lax.scan(step, (params, tx.init(params)), jnp.arange(steps))
        return params, losses

    params, losses = run(params)
    return graphdef, params, losses


@jax.jit
def _tag(graphdef, params, ids):
    return jnp.argmax(nnx.merge(graphdef, params)(ids), -1)


def tag(graphdef: nnx.GraphDef, params: nnx.State, ids) -> jax.Array:
    """Predicted tag per word (B, T)."""
    return _tag(graphdef, params, jnp.asarray(ids, jnp.int32))


# --- the actioner's copy path ---------------------------------------------------------------------------------
#
# A pointer-generator head (See et al., 2017) on the actioner's decoder: at every answer position the next
# token is drawn from  g * softmax(LM logits) + (1 - g) * attention over the prompt's value tokens (the
# requirement memory's levels), so a stated dimension can be copied into a command argument instead of being
# regenerated from the vocabulary. Queries are the decoder's final hidden state at the predicting position,
# keys its final hidden state at each memory value token (which has read the role word before it).


class CopyHead(nnx.Module):
    """Pointer scores and the generate-vs-copy gate from the decoder's final hidden states."""

    def __init__(self, hidden: int, *, dim: int = 32, rngs: nnx.Rngs):
        self.dim = dim
        self.query = nnx.Linear(hidden, dim, rngs=rngs)
        self.key = nnx.Linear(hidden, dim, rngs=rngs)
        self.gate = nnx.Linear(hidden, 1, rngs=rngs)

    def attend(self, h: jax.Array, source_h: jax.Array, allowed: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """h (B, T, D) queries, source_h (B, S, D), allowed (B, T, S) -> copy attention (B, T, S) (zero rows where
        nothing may be copied), log g and log (1 - g) (B, T); g = 1 where nothing may be copied."""
        scores = jnp.einsum("btc,bsc->bts", self.query(h), self.key(source_h)) / jnp.sqrt(float(self.dim))
        scores = jnp.where(allowed, scores, -jnp.inf)
        has = allowed.any(-1)
        attn = jnp.where(has[..., None], jax.nn.softmax(jnp.where(has[..., None], scores, 0.0), axis=-1), 0.0)
        z = self.gate(h)[..., 0]
        log_gen = jnp.where(has, jax.nn.log_sigmoid(z), 0.0)
        log_copy = jnp.where(has, jax.nn.log_sigmoid(-z), -jnp.inf)
        return attn, log_gen, log_copy


def _safe_log(x: jax.Array) -> jax.Array:
    positive = x > 0
    return jnp.where(positive, jnp.log(jnp.where(positive, x, 1.0)), -jnp.inf)


def is_value(ids: jax.Array) -> jax.Array:
    """True where a token is one of the value tokens v0..v255 (contiguous ids)."""
    return (ids >= tokens_lib.IDS["v0"]) & (ids <= tokens_lib.IDS["v255"])


def init_copy_head(hidden: int, key: jax.Array) -> tuple[nnx.GraphDef, nnx.State]:
    return nnx.split(CopyHead(hidden, rngs=nnx.Rngs(params=key)), nnx.Param)


def copy_sources(tokens_: jax.Array, loss_mask: jax.Array) -> jax.Array:
    """(B, T) bool: input positions a packed row may copy from: value tokens of a prompt (the memory's levels;
    instruction numbers are words, plans carry none). Input j is an answer token iff target j - 1 is."""
    in_answer = jnp.pad(loss_mask, ((0, 0), (1, 0)))[:, :-1] > 0
    return is_value(tokens_) & ~in_answer


def copy_loss(lm_graphdef: nnx.GraphDef, copy_graphdef: nnx.GraphDef):
    """loss_fn(params, batch, key) for core.train.make_train_step, params = {"lm": ..., "copy": ...}: the mean
    negative log-likelihood of the answer tokens under the generate / copy mixture."""
    def loss_fn(params, batch, key):
        del key
        seg = batch["segment_ids"]
        out = model_lib.apply(lm_graphdef, params["lm"], batch["inputs"], segment_ids=seg, attention_mask=seg > 0,
                              return_hidden=True)
        lm = nnx.merge(lm_graphdef, params["lm"])
        logits = (out.hidden @ lm.unembedding()).astype(jnp.float32)
        T = seg.shape[1]
        sources = copy_sources(batch["inputs"], batch["loss_mask"])
        allowed = (sources[:, None, :] & (seg[:, :, None] == seg[:, None, :])
                   & jnp.tril(jnp.ones((T, T), bool))[None])
        head = nnx.merge(copy_graphdef, params["copy"])
        attn, log_gen, log_copy = head.attend(out.hidden, out.hidden, allowed)
        targets = batch["targets"]
        gen_lp = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), targets[..., None], -1)[..., 0]
        copy_mass = jnp.sum(attn * (batch["inputs"][:, None, :] == targets[:, :, None]), -1)
        log_p = jnp.logaddexp(log_gen + gen_lp, log_copy + _safe_log(copy_mass))
        w = batch["loss_mask"].astype(jnp.float32)
        denom = jnp.maximum(w.sum(), 1.0)
        has = allowed.any(-1) & (w > 0)
        gate = jnp.sum(jnp.exp(log_gen) * has) / jnp.maximum(has.sum(), 1)
        return -(log_p * w).sum() / denom, {"copy_gate": gate}

    return loss_fn


@functools.partial(jax.jit, static_argnames=("lm_graphdef", "copy_graphdef", "max_new_tokens", "eos_id", "pad_id"))
def copy_greedy(lm_graphdef: nnx.GraphDef, copy_graphdef: nnx.GraphDef, params, ids: jax.Array, mask: jax.Array,
                *, max_new_tokens: int, eos_id: int, pad_id: int) -> jax.Array:
    """Greedy decoding under the generate / copy mixture from left-padded prompts (B, P): tokens (B, N), each row
    up to and including its first `eos_id`, then `pad_id`."""
    lm = nnx.merge(lm_graphdef, params["lm"])
    head = nnx.merge(copy_graphdef, params["copy"])
    B, P = ids.shape
    cache = model_lib.init_cache(lm.config, B, P + max_new_tokens)
    out = lm(ids, attention_mask=mask, cache=cache, return_hidden=True)
    source_h = out.hidden
    allowed = (mask & is_value(ids))[:, None, :]
    unembedding = lm.unembedding()
    onehot = jax.nn.one_hot(ids, unembedding.shape[1], dtype=jnp.float32)  # (B, P, V)

    def next_token(h):  # h (B, D)
        attn, log_gen, log_copy = head.attend(h[:, None], source_h, allowed)
        p = (jnp.exp(log_gen) * jax.nn.softmax((h @ unembedding).astype(jnp.float32), -1)
             + jnp.exp(log_copy) * jnp.einsum("bs,bsv->bv", attn[:, 0], onehot))
        return jnp.argmax(p, -1).astype(jnp.int32)

    def step(carry, _):
        h, cache, done = carry
        tok = jnp.where(done, pad_id, next_token(h))
        o = lm(tok[:, None], attention_mask=~done[:, None], cache=cache, return_hidden=True)
        return (o.hidden[:, -1], o.cache, done | (tok == eos_id)), tok

    _, toks = jax.lax.scan(step, (out.hidden[:, -1], out.cache, jnp.zeros((B,), bool)), None,
                           length=max_new_tokens)
    return toks.T
