"""The spiking encoder F (backbone + projector), the PredNext heads P_T, P_C and the SimSiam/BYOL predictor.

Input clips are batch-major (B, T, H, W, C), one frame per SNN time step; inside, everything is time-major
(T, B, ...). Per step: backbone feature f^t = global average of the last stage's spikes, z^t = projector(f^t);
the clip feature is z = mean_t z^t.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from .configs import ModelConfig
from .spiking import SEWBlock, SpikingConv, merge_time, split_time


class MLP(nnx.Module):
    """Linear -> BN -> ReLU -> Linear (the heads of the notes: 2 layers with BatchNorm) on (..., d_in); with
    `out_bn`, a BN without scale and shift on the output too (SimSiam's projector: BN on its output fc)."""

    def __init__(self, d_in: int, hidden: int, d_out: int, *, rngs: nnx.Rngs, out_bn: bool = False):
        self.fc1 = nnx.Linear(d_in, hidden, use_bias=False, rngs=rngs)
        self.bn = nnx.BatchNorm(hidden, momentum=0.9, rngs=rngs)
        self.fc2 = nnx.Linear(hidden, d_out, use_bias=not out_bn, rngs=rngs)
        self.out_bn = (nnx.BatchNorm(d_out, momentum=0.9, use_scale=False, use_bias=False, rngs=rngs)
                       if out_bn else None)

    def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
        shape = x.shape
        h = self.fc1(x.reshape(-1, shape[-1]))
        h = jax.nn.relu(self.bn(h, use_running_average=not train))
        out = self.fc2(h)
        if self.out_bn is not None:
            out = self.out_bn(out, use_running_average=not train)
        return out.reshape(*shape[:-1], -1)


class SpikingCNN(nnx.Module):
    """One spiking conv per stage (stride 1 for the first, 2 after), each followed by SEW blocks."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        cin = config.in_channels
        self.stages = nnx.List()
        for i, c in enumerate(config.channels):
            layers = nnx.List([SpikingConv(cin, c, stride=config.stem_stride if i == 0 else 2,
                                             lif=config.lif, rngs=rngs)])
            for _ in range(config.blocks_per_stage):
                layers.append(SEWBlock(c, c, lif=config.lif, rngs=rngs))
            self.stages.append(layers)
            cin = c
        self.out_features = cin

    def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
        for layers in self.stages:
            for layer in layers:
                x = layer(x, train=train)
        return x


class SEWResNet18(nnx.Module):
    """SEW-ResNet18 (ADD connect): 7x7/2 spiking stem, 3x3/2 max pool, 4 stages of 2 SEW blocks."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        if len(config.channels) != 4:
            raise ValueError(f"model.channels={config.channels}: expected 4 stage widths for sew_resnet18")
        self.stem = SpikingConv(config.in_channels, config.channels[0], kernel=7, stride=2, lif=config.lif, rngs=rngs)
        self.blocks = nnx.List()
        cin = config.channels[0]
        for i, c in enumerate(config.channels):
            self.blocks.append(SEWBlock(cin, c, stride=1 if i == 0 else 2, lif=config.lif, rngs=rngs))
            self.blocks.append(SEWBlock(c, c, lif=config.lif, rngs=rngs))
            cin = c
        self.out_features = cin

    def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
        x = self.stem(x, train=train)
        t = x.shape[0]
        x = split_time(nnx.max_pool(merge_time(x), (3, 3), strides=(2, 2), padding="SAME"), t)
        for block in self.blocks:
            x = block(x, train=train)
        return x


class PredNextModel(nnx.Module):
    """F = projector(backbone), the predictor h (SimSiam/BYOL), and PredNext's P_T (step) and P_C (clip)."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.backbone = SpikingCNN(config, rngs=rngs) if config.arch == "cnn" else SEWResNet18(config, rngs=rngs)
        c, d, h = self.backbone.out_features, config.proj_dim, config.head_hidden
        self.projector = MLP(c, config.proj_hidden, d, rngs=rngs, out_bn=config.proj_out_bn)
        self.predictor = MLP(d, h, d, rngs=rngs)
        self.step_head = MLP(d, h, d, rngs=rngs)
        self.clip_head = MLP(d, h, d, rngs=rngs)

    def encode(self, clips: jax.Array, *, train: bool) -> tuple[jax.Array, jax.Array]:
        """clips (B, T, H, W, C) -> (f (T, B, C) backbone features, z (T, B, D) per-step features)."""
        if clips.ndim != 5 or clips.shape[-1] != self.config.in_channels:
            raise ValueError(f"clips of shape {clips.shape}: expected (B, T, H, W, {self.config.in_channels})")
        spikes = self.backbone(jnp.swapaxes(clips, 0, 1), train=train)
        f = spikes.mean(axis=(2, 3))
        return f, self.projector(f, train=train)

    def encode_views(self, views: jax.Array, *, train: bool) -> tuple[jax.Array, jax.Array]:
        """views (2, B, T, H, W, C) -> f (T, 2B, C), z (T, 2B, D), view 1 in the first B columns. With
        `per_view_bn` each view is its own forward pass (BN statistics per view, as SimSiam's recipe); else
        both views go through as one batch of 2B."""
        if self.config.per_view_bn:
            (f1, z1), (f2, z2) = (self.encode(v, train=train) for v in views)
            return jnp.concatenate([f1, f2], 1), jnp.concatenate([z1, z2], 1)
        return self.encode(views.reshape(-1, *views.shape[2:]), train=train)
