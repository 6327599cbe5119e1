"""The network: an nnx MLP (784-100-100-10 as in DER's Seq-MNIST protocol), optionally after a conv stem.

Training works on a pure dict of parameters (`Net.init`, `Net.apply`) so that every run of an experiment can
be vmapped; `apply` also returns each dense hidden layer's post-ReLU activations, which GUM scores.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from optimization.deduce.configs import ModelConfig

Params = dict[str, Any]


class ContinualNet(nnx.Module):
    """conv (3x3, stride 2, ReLU) x len(conv) -> flatten -> dense ReLU x len(hidden) -> linear head."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...],
                 conv: tuple[int, ...] = (), *, rngs: nnx.Rngs):
        self.n_conv, self.n_hidden = len(conv), len(hidden)
        channels = input_shape[-1] if conv else None
        for i, c in enumerate(conv):
            setattr(self, f"conv{i}", nnx.Conv(channels, c, (3, 3), strides=(2, 2), rngs=rngs))
            channels = c
        if conv:
            h, w = input_shape[0], input_shape[1]
            for _ in conv:
                h, w = -(-h // 2), -(-w // 2)
            width = h * w * channels
        else:
            width = 1
            for s in input_shape:
                width *= s
        for i, hdim in enumerate(hidden):
            setattr(self, f"fc{i}", nnx.Linear(width, hdim, rngs=rngs))
            width = hdim
        self.head = nnx.Linear(width, num_classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        """x: (B, *input_shape) -> logits (B, C), {"fc<i>": (B, hidden_i)} post-activation features."""
        for i in range(self.n_conv):
            x = jax.nn.relu(getattr(self, f"conv{i}")(x))
        x = x.reshape(x.shape[0], -1)
        hiddens = {}
        for i in range(self.n_hidden):
            x = jax.nn.relu(getattr(self, f"fc{i}")(x))
            hiddens[f"fc{i}"] = x
        return self.head(x), hiddens


@dataclasses.dataclass(frozen=True)
class Net:
    """Pure-function view of ContinualNet: init(key) -> params dict; apply(params, x) -> (logits, hiddens)."""

    graphdef: Any
    template: Any
    gum_pairs: tuple[tuple[str, str], ...]   # (dense hidden layer, the layer its outputs feed)

    def init(self, key: jax.Array) -> Params:
        """Fresh parameters: LeCun-normal kernels (nnx's default), zero biases."""
        flat = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(self.template))
        leaves, treedef = flat
        keys = jax.random.split(key, len(leaves))
        out = []
        for (path, leaf), k in zip(leaves, keys):
            name = str(path[-1].key)
            if name == "kernel":
                out.append(jax.nn.initializers.lecun_normal()(k, leaf.shape, leaf.dtype))
            else:
                out.append(jnp.zeros(leaf.shape, leaf.dtype))
        return jax.tree.unflatten(treedef, out)

    def apply(self, params: Params, x: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        state = jax.tree.map(lambda a: a, self.template)
        nnx.replace_by_pure_dict(state, params)
        return nnx.merge(self.graphdef, state)(x)


def make_net(config: ModelConfig, input_shape: tuple[int, ...], num_classes: int) -> Net:
    module = ContinualNet(tuple(input_shape), num_classes, config.hidden, config.conv, rngs=nnx.Rngs(0))
    graphdef, template = nnx.split(module, nnx.Param)
    names = [f"fc{i}" for i in range(len(config.hidden))] + ["head"]
    return Net(graphdef, template, tuple(zip(names[:-1], names[1:])))
