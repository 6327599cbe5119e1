"""Logical axis names -> ("data", "model") mesh shardings for the decoder's parameters.

Tensor-parallel by default: vocab, heads, kv_heads and mlp are split over "model"; embed, head_dim and norm
are replicated. A dimension whose size the mesh axis does not divide (e.g. 2 KV heads on a 4-way "model"
axis) stays replicated instead of failing, so one rule set serves every model size.
"""

from __future__ import annotations

from typing import Sequence

import jax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DEFAULT_RULES: tuple[tuple[str, str | None], ...] = (
    ("vocab", "model"),
    ("heads", "model"),
    ("kv_heads", "model"),
    ("mlp", "model"),
    ("embed", None),
    ("head_dim", None),
    ("norm", None),
)


def logical_to_spec(names: Sequence[str | None], shape: Sequence[int], mesh: Mesh,
                    rules: Sequence[tuple[str, str | None]] | None = None) -> P:
    """PartitionSpec for one array from its logical names, replicating non-divisible dims."""
    table = dict(rules if rules is not None else DEFAULT_RULES)
    used: set[str] = set()
    spec = []
    for name, size in zip(names, shape):
        axis = table.get(name) if name is not None else None
        if axis is not None and (axis in used or axis not in mesh.shape or size % mesh.shape[axis]):
            axis = None
        if axis is not None:
            used.add(axis)
        spec.append(axis)
    return P(*spec)


def param_shardings(params: nnx.State, mesh: Mesh, rules=None) -> nnx.State:
    """A State of NamedShardings matching `params` (arrays or ShapeDtypeStructs with logical names)."""
    logical = nnx.get_partition_spec(params)

    def one(var, spec_var):
        spec = spec_var.get_value()
        names = tuple(spec) if spec is not None else ()
        shape = var.get_value().shape
        names = names + (None,) * (len(shape) - len(names))
        return NamedSharding(mesh, logical_to_spec(names, shape, mesh, rules))

    is_var = lambda x: isinstance(x, nnx.Variable)  # noqa: E731
    return jax.tree.map(lambda v, s: v.replace(one(v, s)), params, logical, is_leaf=is_var)


def shard_params(params: nnx.State, mesh: Mesh, rules=None) -> nnx.State:
    """Place params on the mesh by their logical names."""
    shardings = param_shardings(params, mesh, rules)
    return jax.device_put(params, shardings)
