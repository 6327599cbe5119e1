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

    @property
    def feature_layer(self) -> str:
        """The hidden layer whose features detector B's domain classifier reads (the last dense one)."""
        return self.gum_pairs[-1][0]

    def apply_train(self, params: Params, x: jax.Array):
        """No batch norm here: the training forward pass is `apply`, with no running statistics."""
        logits, hid = self.apply(params, x)
        return logits, hid, {}

    @staticmethod
    def set_stats(params: Params, stats) -> Params:
        return params

    @staticmethod
    def restore_stats(new: Params, old: Params) -> Params:
        return new

    @staticmethod
    def mask_stats(tree: Params) -> Params:
        return tree

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


def make_net(config: ModelConfig, input_shape: tuple[int, ...], num_classes: int) -> Net | ResNet18:
    if config.arch == "resnet18":
        return ResNet18(tuple(input_shape), num_classes, nf=config.width)
    module = ContinualNet(tuple(input_shape), num_classes, config.hidden, config.conv, rngs=nnx.Rngs(0))
    graphdef, template = nnx.split(module, nnx.Param)
    names = [f"fc{i}" for i in range(len(config.hidden))] + ["head"]
    return Net(graphdef, template, tuple(zip(names[:-1], names[1:])))


# ---- ResNet-18 with batch norm (the paper's backbone; the `gpu` preset) -------------------------------------
_STAGES = ((1, 1), (2, 2), (4, 2), (8, 2))   # (width multiple, first stride); two BasicBlocks per stage


def _conv(x, w, stride):
    return jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


@dataclasses.dataclass(frozen=True)
class ResNet18:
    """The CIFAR ResNet-18 of the released code's Mammoth backbone (3x3 stem, stride 1, no max-pool; 4 stages of
    2 BasicBlocks at width nf x (1, 2, 4, 8); global average pool; linear head), with batch norm, as pure
    functions of a params dict. Batch-norm running statistics live in the dict too ("mean"/"var" leaves of
    every "bn*" entry); `apply` uses them (evaluation), `apply_train` normalises with the batch's statistics
    and returns the updated running ones, which the trainer writes back after every step (`set_stats`), so no
    gradient, weight decay, unlearning step or noise ever moves them. GUM acts on dense hidden layers only,
    so it has nothing to reset here (gum_pairs is empty)."""

    input_shape: tuple[int, ...]
    num_classes: int
    nf: int = 64
    momentum: float = 0.9          # running <- momentum running + (1 - momentum) batch (PyTorch's 0.1)
    gum_pairs: tuple = ()
    feature_layer: str = "features"

    def _names(self):
        """(block name, in channels, out channels, stride) for the 8 BasicBlocks."""
        out, c_in = [], self.nf
        for s, (mult, stride) in enumerate(_STAGES):
            for b in range(2):
                c_out = self.nf * mult
                out.append((f"s{s}b{b}", c_in, c_out, stride if b == 0 else 1))
                c_in = c_out
        return out

    def init(self, key: jax.Array) -> Params:
        keys = iter(jax.random.split(key, 64))

        def he(k, shape):   # He normal (untruncated): std sqrt(2 / fan_in)
            fan_in = shape[0] * shape[1] * shape[2]
            return jax.random.normal(k, shape) * jnp.sqrt(2.0 / fan_in)

        def bn(c):
            return {"scale": jnp.ones((c,)), "bias": jnp.zeros((c,)), "mean": jnp.zeros((c,)), "var": jnp.ones((c,))}

        c0 = self.input_shape[-1]
        p: Params = {"stem": {"kernel": he(next(keys), (3, 3, c0, self.nf))}, "bn_stem": bn(self.nf)}
        for name, ci, co, stride in self._names():
            blk = {"conv1": {"kernel": he(next(keys), (3, 3, ci, co))}, "bn1": bn(co),
                   "conv2": {"kernel": he(next(keys), (3, 3, co, co))}, "bn2": bn(co)}
            if stride != 1 or ci != co:
                blk["short"] = {"kernel": he(next(keys), (1, 1, ci, co))}
                blk["bn_short"] = bn(co)
            p[name] = blk
        p["head"] = {"kernel": jax.random.normal(next(keys), (8 * self.nf, self.num_classes)) / jnp.sqrt(8.0 * self.nf),
                     "bias": jnp.zeros((self.num_classes,))}
        return p

    def _forward(self, params, x, train: bool):
        new_stats = {}

        def bn(path, q, h):
            if train:
                mean, var = jnp.mean(h, (0, 1, 2)), jnp.var(h, (0, 1, 2))
                m = self.momentum
                n = h.shape[0] * h.shape[1] * h.shape[2]
                new_stats[path] = {"mean": m * q["mean"] + (1 - m) * jax.lax.stop_gradient(mean),
                                   "var": m * q["var"] + (1 - m) * jax.lax.stop_gradient(var) * n / max(n - 1, 1)}
            else:
                mean, var = q["mean"], q["var"]
            return (h - mean) * jax.lax.rsqrt(var + 1e-5) * q["scale"] + q["bias"]

        h = jax.nn.relu(bn(("bn_stem",), params["bn_stem"], _conv(x, params["stem"]["kernel"], 1)))
        for name, _, _, stride in self._names():
            blk = params[name]
            out = jax.nn.relu(bn((name, "bn1"), blk["bn1"], _conv(h, blk["conv1"]["kernel"], stride)))
            out = bn((name, "bn2"), blk["bn2"], _conv(out, blk["conv2"]["kernel"], 1))
            short = h
            if "short" in blk:
                short = bn((name, "bn_short"), blk["bn_short"], _conv(h, blk["short"]["kernel"], stride))
            h = jax.nn.relu(out + short)
        feats = jnp.mean(h, (1, 2))
        logits = feats @ params["head"]["kernel"] + params["head"]["bias"]
        return logits, {"features": feats}, new_stats

    def apply(self, params: Params, x: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Evaluation mode (running statistics): (logits, {"features": pooled features})."""
        logits, hid, _ = self._forward(params, x, train=False)
        return logits, hid

    def apply_train(self, params: Params, x: jax.Array):
        """Training mode (batch statistics): (logits, hiddens, updated running statistics)."""
        return self._forward(params, x, train=True)

    @staticmethod
    def set_stats(params: Params, stats) -> Params:
        """params with every batch-norm entry's mean/var replaced by `stats` ({path: {mean, var}})."""
        params = jax.tree.map(lambda a: a, params)
        for path, st in stats.items():
            node = params
            for k in path:
                node = node[k]
            node["mean"], node["var"] = st["mean"], st["var"]
        return params

    @staticmethod
    def restore_stats(new: Params, old: Params) -> Params:
        """`new` with the batch-norm statistics' leaves taken from `old`."""
        flat, treedef = jax.tree_util.tree_flatten_with_path(new)
        out = [o if str(getattr(path[-1], "key", "")) in ("mean", "var") else v
               for (path, v), o in zip(flat, jax.tree.leaves(old))]
        return jax.tree.unflatten(treedef, out)

    @staticmethod
    def mask_stats(tree: Params) -> Params:
        """Zero the batch-norm statistics' leaves of a params-shaped tree (gradients, Fisher)."""
        flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
        out = [jnp.zeros_like(v) if str(getattr(path[-1], "key", "")) in ("mean", "var") else v
               for path, v in flat]
        return jax.tree.unflatten(treedef, out)
