"""A value head for PPO's critic: one nnx Linear (D -> 1) on a `core.lm` decoder's final hidden states.

The trunk's (graphdef, params) may be the policy's own (a shared trunk) or a separate critic copy (verl's
and OpenRLHF's critic, TRL's value model); `freeze_trunk` stops the gradient at the hidden states so that
only the head trains. Values come aligned with the rollout's token columns (`shift=True`): column j holds
V of the prefix before token j, i.e. of the state in which token j was sampled, so `gae(rewards, values,
rollout.policy)` and the per-token losses line up without further shifting.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from core.lm import model as model_lib


class ValueHead(nnx.Module):
    """V(h) = h @ w + b in float32. w ~ normal(init_std) (default 1 / (D + 1), OpenRLHF's critic head init)
    and b = 0, so initial values are small and the first value losses do not swamp the trunk."""

    def __init__(self, hidden_size: int, *, init_std: float | None = None, rngs: nnx.Rngs):
        if hidden_size < 1:
            raise ValueError(f"hidden_size={hidden_size}: expected >= 1")
        std = 1.0 / (hidden_size + 1) if init_std is None else init_std
        if not std >= 0:
            raise ValueError(f"init_std={init_std}: expected >= 0")
        self.linear = nnx.Linear(hidden_size, 1, kernel_init=nnx.initializers.normal(std),
                                 bias_init=nnx.initializers.zeros, param_dtype=jnp.float32, rngs=rngs)

    def __call__(self, hidden: jax.Array) -> jax.Array:
        """hidden (..., D) -> values (...)."""
        return self.linear(hidden.astype(jnp.float32))[..., 0]


@functools.cache
def _head_graphdef(hidden_size: int) -> nnx.GraphDef:
    return nnx.split(nnx.eval_shape(lambda: ValueHead(hidden_size, rngs=nnx.Rngs(params=0))), nnx.Param)[0]


def init_value_head(hidden_size: int, key: jax.Array, *, init_std: float | None = None) -> nnx.State:
    """A fresh head's params (an nnx.State pytree: linear.kernel (D, 1), linear.bias (1,)), to train beside
    the policy's params; its graphdef is rebuilt from the kernel's shape."""
    return nnx.split(ValueHead(hidden_size, init_std=init_std, rngs=nnx.Rngs(params=key)), nnx.Param)[1]


def value_from_hidden(head_params: nnx.State, hidden: jax.Array) -> jax.Array:
    """The head on hidden states (..., D) -> values (...) in float32."""
    kernel = head_params["linear"]["kernel"]
    D = kernel.shape[0]
    if hidden.shape[-1] != D:
        raise ValueError(f"hidden size {hidden.shape[-1]}: expected the head's {D}")
    return nnx.merge(_head_graphdef(D), head_params, copy=True)(hidden)


@functools.partial(jax.jit, static_argnames=("graphdef", "freeze_trunk", "shift", "remat"))
def values(graphdef: nnx.GraphDef, params: nnx.State, head_params: nnx.State, tokens: jax.Array, *,
           attention_mask: jax.Array | None = None, freeze_trunk: bool = False, shift: bool = True,
           remat: str = "none") -> jax.Array:
    """Per-token values (N, L) of tokens (N, L) (right-padded; attention_mask (N, L) marks real tokens).

    shift=True: column j is the head on the hidden state at j - 1 (the prefix before token j; column 0,
    which has no prefix, is 0). shift=False: column j is the head on hidden state j (V after token j, the
    alignment of `core.lm.logprobs.sequence_logprobs` with targets = tokens shifted left).
    freeze_trunk: no gradient reaches the trunk's params. Differentiable in params and head_params.
    """
    tokens = jnp.asarray(tokens)
    if tokens.ndim != 2:
        raise ValueError(f"tokens shape {tokens.shape}: expected (N, L)")
    trunk = jax.lax.stop_gradient(params) if freeze_trunk else params
    hidden = model_lib.apply(graphdef, trunk, tokens, attention_mask=attention_mask, return_hidden=True,
                             remat=remat).hidden
    v = value_from_hidden(head_params, hidden)
    if shift:
        v = jnp.pad(v[:, :-1], ((0, 0), (1, 0)))
    return v
