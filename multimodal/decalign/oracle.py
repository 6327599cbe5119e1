"""Oracles on the synthetic data: how well a model could do if it knew what alignment tries to recover.

- `latent_oracle`: an MLP trained (Adam, selection on validation MSE, seeds vmapped) on the generating latents
  [z_shared, z_text, z_audio, z_vision] instead of the noisy, warped sequences: the ceiling for a model that
  recovered the shared and unique factors perfectly. The gap between it and the fusion baseline is the headroom
  that any alignment term could at most close.
- `clean_label_oracle`: the label before rounding, the noise floor of the labels themselves.

Both read the `latent_*` / `clean_labels` keys that `data.generate` writes; real MMSA pickles have none.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core.config import BadInputError

from .metrics import regression_metrics

LATENTS = ("latent_shared", "latent_text", "latent_audio", "latent_vision")


def latent_features(split: dict) -> np.ndarray:
    """(N, sum of latent dims) generating latents of one split; BadInputError if the data has none."""
    missing = [k for k in LATENTS if k not in split]
    if missing:
        raise BadInputError(f"data split has no {missing[0]!r}: expected synthetic data from "
                            "multimodal.decalign.data.generate/prepare (real pickles carry no latents)")
    return np.concatenate([np.asarray(split[k], np.float32) for k in LATENTS], axis=-1)


def _init(key, d_in: int, hidden: int):
    k1, k2, k3 = jax.random.split(key, 3)
    w = lambda k, i, o: jax.random.normal(k, (i, o)) / jnp.sqrt(i)
    return {"w1": w(k1, d_in, hidden), "b1": jnp.zeros(hidden), "w2": w(k2, hidden, hidden), "b2": jnp.zeros(hidden),
            "w3": w(k3, hidden, 1), "b3": jnp.zeros(1)}


def mlp(p, x):
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    h = jax.nn.relu(h @ p["w2"] + p["b2"])
    return (h @ p["w3"] + p["b3"])[:, 0]


@functools.lru_cache(maxsize=4)
def _programs(lr: float):
    tx = optax.adam(lr)

    def epoch(params, opt, x, y, perm):
        def body(carry, idx):
            params, opt = carry
            loss, g = jax.value_and_grad(lambda p: jnp.mean((mlp(p, x[idx]) - y[idx]) ** 2))(params)
            upd, opt = tx.update(g, opt, params)
            return (optax.apply_updates(params, upd), opt), loss
        (params, opt), losses = jax.lax.scan(body, (params, opt), perm)
        return params, opt, jnp.mean(losses)

    epoch_v = jax.jit(jax.vmap(epoch, in_axes=(0, 0, None, None, 0)))
    predict_v = jax.jit(jax.vmap(mlp, in_axes=(0, None)))
    return tx, epoch_v, predict_v


def latent_oracle(data: dict, *, seeds: int, epochs: int = 40, hidden: int = 64, lr: float = 1e-3,
                  batch_size: int = 32, seed: int = 0) -> list[dict]:
    """Per seed: test MMSA metrics of the latent MLP at its best validation-MSE epoch (+ val_loss, best_epoch)."""
    x = {s: jnp.asarray(latent_features(data[s])) for s in ("train", "valid", "test")}
    y = {s: np.asarray(data[s]["labels"], np.float32) for s in ("train", "valid", "test")}
    tx, epoch_v, predict_v = _programs(lr)
    keys = jax.vmap(jax.random.key)(jnp.arange(seed, seed + seeds))
    params = jax.vmap(lambda k: _init(k, x["train"].shape[1], hidden))(keys)
    opt = jax.vmap(tx.init)(params)
    n = x["train"].shape[0]
    steps = n // batch_size
    best = [{"val_loss": np.inf, "best_epoch": -1, "test": None} for _ in range(seeds)]
    for e in range(epochs):
        perms = np.stack([np.random.default_rng([seed + s, e, 7]).permutation(n)[: steps * batch_size]
                          .reshape(steps, batch_size) for s in range(seeds)])
        params, opt, _ = epoch_v(params, opt, x["train"], jnp.asarray(y["train"]), jnp.asarray(perms))
        pv = np.asarray(predict_v(params, x["valid"]))
        pt = np.asarray(predict_v(params, x["test"]))
        for i in range(seeds):
            v = float(np.mean((pv[i] - y["valid"]) ** 2))
            if v < best[i]["val_loss"]:
                best[i] = {"val_loss": v, "best_epoch": e, "test": pt[i]}
    return [{"seed": i, "best_epoch": b["best_epoch"], "val_loss": b["val_loss"],
             "loss": float(np.mean((b["test"] - y["test"]) ** 2)), **regression_metrics(b["test"], y["test"])}
            for i, b in enumerate(best)]


def clean_label_oracle(data: dict, split: str = "test") -> dict:
    """MMSA metrics of predicting each clip's label before rounding (the labels' own noise floor)."""
    if "clean_labels" not in data[split]:
        raise BadInputError(f"data split {split!r} has no 'clean_labels': expected synthetic data from "
                            "multimodal.decalign.data.generate/prepare")
    clean = np.asarray(data[split]["clean_labels"], np.float32)
    y = np.asarray(data[split]["labels"], np.float32)
    return {"loss": float(np.mean((clean - y) ** 2)), **regression_metrics(clean, y)}
