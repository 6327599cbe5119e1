"""Policy-gradient losses on per-token log-probs: the clipped surrogate (PPO, DAPO's clip-higher, dual clip),
KL to a frozen reference (Schulman's k1 / k2 / k3), an entropy bonus, the clipped value loss, and the loss
aggregation modes the libraries use. `policy_loss` combines them under a frozen `LossConfig`.

All inputs are (N, L) arrays aligned with a mask (N, L) of the tokens that count (the rollout's policy
tokens: observation and padding tokens are in neither the policy loss nor the KL). Pure and jittable.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

AGGREGATIONS = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# our name -> Schulman's estimator; verl's names ("kl", "mse", "low_var_kl") are accepted as aliases.
# A trailing "+" (verl's "k3+"): the value of the estimator with the gradient of k2 (straight-through).
KL_ESTIMATORS = {"k1": "k1", "kl": "k1", "k2": "k2", "mse": "k2", "k3": "k3", "low_var_kl": "k3",
                 "k1+": "k1+", "k3+": "k3+", "low_var_kl+": "k3+"}


def _f32(x) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def _mask(mask, shape) -> jax.Array:
    m = jnp.asarray(mask).astype(bool)
    if m.shape != tuple(shape):
        raise ValueError(f"mask shape {m.shape}: expected {tuple(shape)}")
    return m


def masked_mean(x: jax.typing.ArrayLike, mask: jax.typing.ArrayLike) -> jax.Array:
    """Mean of x over the mask (0 when the mask is empty)."""
    x = _f32(x)
    m = _mask(mask, x.shape)
    return jnp.sum(jnp.where(m, x, 0.0)) / jnp.maximum(m.sum(), 1)


@functools.partial(jax.jit, static_argnames=("mode", "max_response_tokens"))
def aggregate(loss: jax.typing.ArrayLike, mask: jax.typing.ArrayLike, mode: str = "token-mean", *,
              max_response_tokens: int | None = None) -> jax.Array:
    """A per-token loss (N, L) over mask (N, L) -> scalar.

    "token-mean": sum / number of masked tokens (verl / tunix "token-mean", TRL "bnpo" and "dapo",
    OpenRLHF token_level_loss). "seq-mean-token-sum": each row's sum, averaged over rows with a token.
    "seq-mean-token-mean": each row's mean, averaged over rows with a token (verl, tunix, OpenRLHF; TRL
    "grpo" also counts empty rows). "seq-mean-token-sum-norm": sum / (N * max_response_tokens), Dr.GRPO's
    constant normaliser (TRL "dr_grpo"; verl divides by max_response_tokens only, i.e. N times ours).
    """
    loss = _f32(loss)
    if loss.ndim != 2:
        raise ValueError(f"loss shape {loss.shape}: expected (N, L)")
    m = _mask(mask, loss.shape)
    masked = jnp.where(m, loss, 0.0)
    counts = m.sum(axis=-1)
    rows = jnp.maximum(jnp.sum(counts > 0), 1)
    if mode == "token-mean":
        return masked.sum() / jnp.maximum(counts.sum(), 1)
    if mode == "seq-mean-token-sum":
        return masked.sum(axis=-1).sum() / rows
    if mode == "seq-mean-token-mean":
        return (masked.sum(axis=-1) / jnp.maximum(counts, 1)).sum() / rows
    if mode == "seq-mean-token-sum-norm":
        if max_response_tokens is None or max_response_tokens < 1:
            raise ValueError(f"max_response_tokens={max_response_tokens}: expected >= 1 for {mode}")
        return masked.sum() / (loss.shape[0] * max_response_tokens)
    raise ValueError(f"mode={mode!r}: expected one of {AGGREGATIONS}")


@functools.partial(jax.jit, static_argnames=("clip_low", "clip_high", "dual_clip", "log_ratio_clamp"))
def clipped_surrogate(logprobs: jax.typing.ArrayLike, old_logprobs: jax.typing.ArrayLike,
                      advantages: jax.typing.ArrayLike, mask: jax.typing.ArrayLike, *, clip_low: float = 0.2,
                      clip_high: float | None = None, dual_clip: float | None = None,
                      log_ratio_clamp: float = 20.0) -> tuple[jax.Array, jax.Array]:
    """PPO's clipped surrogate (Schulman et al. 2017, eq. 7) as a loss to minimise, per token (N, L).

    ratio = exp(clip(logp - old_logp, +-log_ratio_clamp)) (verl and OpenRLHF clamp at 20);
    loss = max(-A ratio, -A clip(ratio, 1 - clip_low, 1 + clip_high)), clip_high defaulting to clip_low
    (DAPO's clip-higher sets it larger). dual_clip c > 1 (Ye et al. 2020; verl clip_ratio_c, OpenRLHF
    dual_clip) also bounds the loss of negative-advantage tokens by -c A. Returns (loss (N, L), clip_frac):
    the masked fraction of tokens where the clipped term is the larger (verl's pg_clipfrac).
    """
    logp, old, adv = _f32(logprobs), _f32(old_logprobs), _f32(advantages)
    if logp.ndim != 2 or old.shape != logp.shape or adv.shape != logp.shape:
        raise ValueError(f"logprobs {logp.shape}, old_logprobs {old.shape}, advantages {adv.shape}: expected the "
                         "same (N, L)")
    m = _mask(mask, logp.shape)
    _check_clips(clip_low, clip_high, dual_clip)
    high = clip_low if clip_high is None else clip_high
    ratio = jnp.exp(jnp.clip(logp - old, -log_ratio_clamp, log_ratio_clamp))
    unclipped = -adv * ratio
    clipped = -adv * jnp.clip(ratio, 1.0 - clip_low, 1.0 + high)
    loss = jnp.maximum(unclipped, clipped)
    if dual_clip is not None:
        loss = jnp.where(adv < 0, jnp.minimum(loss, -adv * dual_clip), loss)
    return jnp.where(m, loss, 0.0), masked_mean(clipped > unclipped, m)


def _check_clips(clip_low, clip_high, dual_clip) -> None:
    if not 0 < clip_low < 1:
        raise ValueError(f"clip_low={clip_low}: expected 0 < clip_low < 1")
    if clip_high is not None and not clip_high > 0:
        raise ValueError(f"clip_high={clip_high}: expected > 0 (or None for clip_low)")
    if dual_clip is not None and not dual_clip > 1:
        raise ValueError(f"dual_clip={dual_clip}: expected > 1 (or None for off)")


@functools.partial(jax.jit, static_argnames=("estimator", "clamp"))
def kl_estimate(logprobs: jax.typing.ArrayLike, ref_logprobs: jax.typing.ArrayLike, estimator: str = "k3", *,
                clamp: bool = True) -> jax.Array:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (J. Schulman, "Approximating KL divergence",
    2020), with d = logp - ref_logp: k1 = d; k2 = d^2 / 2; k3 = exp(-d) - 1 + d (unbiased, >= 0).
    clamp (k3 only, as verl's low_var_kl): -d clipped to [-20, 20] before exp and k3 to [-10, 10].
    "k3+" / "k1+": that value with k2's gradient (verl's straight-through variants).
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"estimator={estimator!r}: expected one of {sorted(KL_ESTIMATORS)}")
    kind = KL_ESTIMATORS[estimator]
    logp, ref = _f32(logprobs), _f32(ref_logprobs)
    if ref.shape != logp.shape:
        raise ValueError(f"ref_logprobs shape {ref.shape}: expected {logp.shape}")
    d = logp - ref
    k2 = 0.5 * d * d
    if kind.startswith("k1"):
        value = d
    elif kind == "k2":
        return k2
    else:
        neg = jnp.clip(-d, -20.0, 20.0) if clamp else -d
        value = jnp.exp(neg) - 1.0 - neg
        if clamp:
            value = jnp.clip(value, -10.0, 10.0)
    if kind.endswith("+"):
        return k2 - jax.lax.stop_gradient(k2) + jax.lax.stop_gradient(value)
    return value


@functools.partial(jax.jit, static_argnames=("clip", "aggregation", "max_response_tokens", "return_clip_frac"))
def value_loss(values: jax.typing.ArrayLike, old_values: jax.typing.ArrayLike, returns: jax.typing.ArrayLike,
               mask: jax.typing.ArrayLike, *, clip: float | None = 0.2, aggregation: str = "token-mean",
               max_response_tokens: int | None = None, return_clip_frac: bool = False
               ) -> jax.Array | tuple[jax.Array, jax.Array]:
    """0.5 * aggregate(max((V - R)^2, (V_clipped - R)^2)), V_clipped = old_V + clip(V - old_V, +-clip)
    (PPO2's value clipping, as TRL PPO / verl compute_value_loss / OpenRLHF ValueLoss); clip None: plain
    0.5 (V - R)^2. values / old_values (at rollout) / returns / mask: (N, L). Returns the scalar loss, and
    with return_clip_frac (loss, clip_frac: masked fraction where the clipped error is the larger)."""
    v, old, ret = _f32(values), _f32(old_values), _f32(returns)
    if v.ndim != 2 or old.shape != v.shape or ret.shape != v.shape:
        raise ValueError(f"values {v.shape}, old_values {old.shape}, returns {ret.shape}: expected the same (N, L)")
    if clip is not None and not clip > 0:
        raise ValueError(f"clip={clip}: expected > 0 (or None for no clipping)")
    m = _mask(mask, v.shape)
    err = (v - ret) ** 2
    if clip is None:
        per_token, frac = err, jnp.zeros(())
    else:
        err_clipped = (old + jnp.clip(v - old, -clip, clip) - ret) ** 2
        per_token, frac = jnp.maximum(err, err_clipped), masked_mean(err_clipped > err, m)
    loss = 0.5 * aggregate(per_token, m, aggregation, max_response_tokens=max_response_tokens)
    return (loss, frac) if return_clip_frac else loss


@dataclasses.dataclass(frozen=True, kw_only=True)
class LossConfig:
    """clip_low / clip_high: the ratio's clip range [1 - clip_low, 1 + clip_high] (clip_high None: clip_low;
    DAPO uses 0.2 / 0.28). dual_clip: None (off) or c > 1 (verl's clip_ratio_c = 3 is always on there).
    kl_coef: weight of the KL to the reference (0: off; ref_logprobs are then not needed); kl_estimator:
    k1 / k2 / k3 (or verl's names, see KL_ESTIMATORS). entropy_coef: weight of the entropy bonus (0: off).
    aggregation: one of AGGREGATIONS; max_response_tokens: the constant of "seq-mean-token-sum-norm"
    (required there; pass the rollout's response budget). log_ratio_clamp: |logp - old_logp| bound before exp.
    """

    clip_low: float = 0.2
    clip_high: float | None = None
    dual_clip: float | None = None
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_clamp: bool = True
    entropy_coef: float = 0.0
    aggregation: str = "token-mean"
    max_response_tokens: int | None = None
    log_ratio_clamp: float = 20.0

    def __post_init__(self):
        _check_clips(self.clip_low, self.clip_high, self.dual_clip)
        if not self.kl_coef >= 0:
            raise ValueError(f"kl_coef={self.kl_coef}: expected >= 0")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator={self.kl_estimator!r}: expected one of {sorted(KL_ESTIMATORS)}")
        if not self.entropy_coef >= 0:
            raise ValueError(f"entropy_coef={self.entropy_coef}: expected >= 0")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation={self.aggregation!r}: expected one of {AGGREGATIONS}")
        if self.aggregation == "seq-mean-token-sum-norm" and (self.max_response_tokens is None
                                                             or self.max_response_tokens < 1):
            raise ValueError(f"max_response_tokens={self.max_response_tokens}: expected >= 1 with aggregation "
                             "'seq-mean-token-sum-norm'")
        if not self.log_ratio_clamp > 0:
            raise ValueError(f"log_ratio_clamp={self.log_ratio_clamp}: expected > 0")


def policy_loss(logprobs: jax.typing.ArrayLike, old_logprobs: jax.typing.ArrayLike,
                ref_logprobs: jax.typing.ArrayLike | None, advantages: jax.typing.ArrayLike,
                mask: jax.typing.ArrayLike, entropies: jax.typing.ArrayLike | None, config: LossConfig
                ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The actor's loss: aggregate(surrogate + kl_coef * KL(pi || ref) - entropy_coef * H) over mask.

    logprobs (N, L) of the policy being trained (differentiated), old_logprobs (N, L) recorded at rollout,
    ref_logprobs (N, L) of the frozen reference or None (needed when kl_coef > 0), advantages (N, L),
    entropies (N, L) per-token entropies of the trained policy or None (needed when entropy_coef > 0).
    The three terms share one aggregation, which equals verl's pg_loss + kl_coef * kl_loss - entropy_coeff *
    entropy_loss (each aggregated alike) and TRL's per-token beta * kl. kl / entropy are reported whenever
    their inputs are given. Returns (loss, metrics): pg_loss, clip_frac,
    clip_frac_low / clip_frac_high (the ratio beyond 1 - clip_low with A < 0 / beyond 1 + clip_high with
    A > 0), dual_clip_frac, ppo_kl (mean old_logp - logp), ratio_mean, ratio_max, kl, entropy (masked means).
    """
    if not isinstance(config, LossConfig):
        raise ValueError(f"config is {type(config).__name__}: expected a LossConfig")
    if config.kl_coef > 0 and ref_logprobs is None:
        raise ValueError("ref_logprobs=None with kl_coef > 0: expected the reference policy's log-probs")
    if config.entropy_coef > 0 and entropies is None:
        raise ValueError("entropies=None with entropy_coef > 0: expected per-token entropies")
    return _policy_loss(logprobs, old_logprobs, advantages, mask, ref_logprobs, entropies, config=config)


@functools.partial(jax.jit, static_argnames=("config",))
def _policy_loss(logprobs, old_logprobs, advantages, mask, ref_logprobs, entropies, *, config: LossConfig):
    c = config
    logp, old, adv = _f32(logprobs), _f32(old_logprobs), _f32(advantages)
    m = _mask(mask, logp.shape)
    per_token, clip_frac = clipped_surrogate(logp, old, adv, m, clip_low=c.clip_low, clip_high=c.clip_high,
                                             dual_clip=c.dual_clip, log_ratio_clamp=c.log_ratio_clamp)
    agg = functools.partial(aggregate, mode=c.aggregation, max_response_tokens=c.max_response_tokens)
    log_ratio = jnp.clip(logp - old, -c.log_ratio_clamp, c.log_ratio_clamp)
    ratio = jnp.exp(log_ratio)
    high = c.clip_low if c.clip_high is None else c.clip_high
    metrics = {"pg_loss": agg(per_token, m), "clip_frac": clip_frac,
               "clip_frac_low": masked_mean((ratio < 1 - c.clip_low) & (adv < 0), m),
               "clip_frac_high": masked_mean((ratio > 1 + high) & (adv > 0), m),
               "dual_clip_frac": (masked_mean((adv < 0) & (ratio > c.dual_clip), m) if c.dual_clip is not None
                                  else jnp.zeros(())),
               "ppo_kl": masked_mean(-log_ratio, m),
               "ratio_mean": masked_mean(ratio, m),
               "ratio_max": jnp.max(jnp.where(m, ratio, -jnp.inf), initial=0.0)}
    total = per_token
    if ref_logprobs is not None:
        kl = kl_estimate(logp, ref_logprobs, c.kl_estimator, clamp=c.kl_clamp)
        metrics["kl"] = masked_mean(kl, m)
        if c.kl_coef > 0:
            total = total + c.kl_coef * kl
    if entropies is not None:
        ent = _f32(entropies)
        metrics["entropy"] = masked_mean(ent, m)
        if c.entropy_coef > 0:
            total = total - c.entropy_coef * ent
    loss = agg(total, m)
    metrics["loss"] = loss
    return loss, metrics
