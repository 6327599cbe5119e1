"""PredNext on user-provided UCF101 / HMDB51 frame folders (the `ucf101` preset, for GPU users).

Pretraining goes through `core.train.fit` (progress bar, metrics.jsonl, checkpoints and automatic resume,
including the clip sampler's position; data-parallel over every local device). Evaluation: a linear probe
on the action label with frozen, clip-averaged backbone features of the train and test splits, and the
temporal inconsistency of the test features.
"""

from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from core import sharding
from core.train import fit, write_metrics

from . import losses as L
from .configs import VARIANTS, Config
from .data import FrameFolderSampler, VideoEntry, frame_folder_entries, load_frames, to_float
from .train import SWITCHES, _shape_key, linear_probe, programs


def clip_features(config: Config, extract, state, entries: list[VideoEntry], chunk: int = 16
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Backbone features averaged over time and over `eval_clips` evenly spaced clips per video (N, C), and
    the per-step projector features of the first clip (T, N, D)."""
    c, size = config.data, config.augment.out_size
    span = (c.clip_len - 1) * config.frame_stride + 1
    feats, steps = [], []
    for i in range(0, len(entries), chunk):
        clips = []
        for e in entries[i: i + chunk]:
            n = len(e.frames)
            for s in np.linspace(0, max(0, n - span), config.train.eval_clips).round().astype(int):
                idx = np.minimum(s + config.frame_stride * np.arange(c.clip_len), n - 1)
                clips.append(load_frames([e.frames[j] for j in idx], size))
        x = to_float(jnp.asarray(np.stack(clips)))
        f, z = extract(state.params, state.stats, x)  # (n*K, T, .)
        k = config.train.eval_clips
        feats.append(np.asarray(f).reshape(-1, k, *f.shape[1:]).mean(axis=(1, 2)))
        steps.append(np.asarray(z).reshape(-1, k, *z.shape[1:])[:, 0])
    return np.concatenate(feats), np.moveaxis(np.concatenate(steps), 1, 0)


def train_frames(config: Config, workdir: str | pathlib.Path) -> dict:
    """Pretrain each variant of `config` on the frame folders (one sub-folder per variant), then evaluate."""
    workdir = pathlib.Path(workdir)
    kw = dict(dataset=config.source, split=1)
    train_entries = frame_folder_entries(config.data_root, config.split_dir, subset="train", **kw)
    test_entries = frame_folder_entries(config.data_root, config.split_dir, subset="test", **kw)
    _, init_fn, _, step, extract, _ = programs(_shape_key(config))
    n_dev = jax.device_count()
    mesh = sharding.make_mesh() if n_dev > 1 and config.train.batch_size % n_dev == 0 else None
    metrics = {}
    for variant in config.variants:
        sw = jnp.asarray([VARIANTS[variant][k] for k in SWITCHES], jnp.float32)
        sampler = FrameFolderSampler(train_entries, config.data, config.train.batch_size,
                                     stride=config.frame_stride, size=config.augment.out_size, seed=config.train.seed)
        state = init_fn(jax.random.key(config.train.seed))
        if mesh is not None:
            state = sharding.replicate(state, mesh)

        def train_step(state, batch, sw=sw):
            return step(state, {"clip": batch["clip"], "future": batch["future"]}, sw)

        state, _ = fit(state, train_step, sampler, num_steps=config.train.steps, workdir=workdir / variant,
                       config=config, log_every=config.train.log_every, ckpt_every=max(config.train.log_every, 500),
                       mesh=mesh)
        ftr, _ = clip_features(config, extract, state, train_entries)
        fte, zte = clip_features(config, extract, state, test_entries)
        ytr = jnp.asarray([e.label for e in train_entries])
        yte = jnp.asarray([e.label for e in test_entries])
        classes = int(max(ytr.max(), yte.max())) + 1
        acc = linear_probe(jnp.asarray(ftr), ytr, jnp.asarray(fte), yte, classes, steps=config.train.probe_steps,
                           lr=config.train.probe_lr)
        metrics[f"{variant}/probe_action"] = float(acc)
        metrics[f"{variant}/inconsistency_z"] = float(L.temporal_inconsistency(jnp.asarray(zte)))
    write_metrics(workdir, metrics)
    (workdir / "results.json").write_text(json.dumps(metrics, indent=1))
    return metrics
