"""Logical axis names -> ("data", "model") mesh shardings for the decoder's parameters, its train state and
its activations.

Parameters carry logical names (`vocab`, `embed`, `heads`, `kv_heads`, `head_dim`, `mlp`, `norm`); a rule set
maps each name to a mesh axis or None (replicated):

- `DEFAULT_RULES`: tensor parallel. vocab, heads, kv_heads and mlp are split over "model"; embed, head_dim and
  norm are replicated, so every "data" replica holds the whole (TP-split) model.
- `FSDP_RULES`: the same tensor parallelism plus `embed` split over "data" (ZeRO-3 / maxtext's `fsdp` axis):
  each data replica keeps 1/data of every matrix (XLA inserts the gathers the matmuls need), so parameter and
  optimizer memory shrink with the data axis too.

A dimension whose size the mesh axis does not divide (e.g. 2 KV heads on a 4-way "model" axis) stays
replicated instead of failing, so one rule set serves every model size. An array never uses one mesh axis
twice: the first dimension that asks for it gets it.

For training, `train_state_shardings` shards a whole `core.train.TrainState` (the optimizer state's leaves
like the parameter they belong to, counts, step and key replicated) and `shard_train_state` places one.
`constrain(x, names)` pins an activation's layout (batch over "data") inside the model; it is a no-op when no
mesh is active (`jax.set_mesh`), so generation and one-device jit are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from core import sharding as core_sharding

Rules = Sequence[tuple[str, str | None]]

DEFAULT_RULES: tuple[tuple[str, str | None], ...] = (
    ("vocab", "model"),
    ("heads", "model"),
    ("kv_heads", "model"),
    ("mlp", "model"),
    ("embed", None),
    ("head_dim", None),
    ("norm", None),
)

FSDP_RULES: tuple[tuple[str, str | None], ...] = (
    ("vocab", "model"),
    ("heads", "model"),
    ("kv_heads", "model"),
    ("mlp", "model"),
    ("embed", "data"),
    ("head_dim", None),
    ("norm", None),
)

# Activations: the batch is split over "data" (data parallel / FSDP), per-head and MLP features over "model"
# (tensor parallel); the residual stream's `embed` is replicated (FSDP splits the weights' embed, not the
# activations'), as in maxtext's `activation_embed` without sequence parallelism.
ACTIVATION_RULES: tuple[tuple[str, str | None], ...] = (
    ("batch", "data"),
    ("seq", None),
    ("embed", None),
    ("heads", "model"),
    ("kv_heads", "model"),
    ("head_dim", None),
    ("mlp", "model"),
    ("vocab", "model"),
)


def logical_to_spec(names: Sequence[str | None], shape: Sequence[int], mesh: Mesh,
                    rules: Rules | None = None) -> P:
    """PartitionSpec for one array from its logical names, replicating non-divisible dims (and naming no
    mesh axis of size 1, which splits nothing: a data-only mesh gives P("data", None, None), not
    P("data", "model", None))."""
    table = dict(rules if rules is not None else DEFAULT_RULES)
    used: set[str] = set()
    spec = []
    for name, size in zip(names, shape):
        axis = table.get(name) if name is not None else None
        if axis is not None and (axis in used or mesh.shape.get(axis, 1) == 1 or size % mesh.shape[axis]):
            axis = None
        if axis is not None:
            used.add(axis)
        spec.append(axis)
    return P(*spec)


def _variable_sharding(var: nnx.Variable, mesh: Mesh, rules: Rules | None) -> NamedSharding:
    """The NamedSharding of one Variable (array or ShapeDtypeStruct) from its logical names."""
    spec = nnx.get_partition_spec(var).get_value()
    names = tuple(spec) if spec is not None else ()
    shape = var.get_value().shape
    names = names + (None,) * (len(shape) - len(names))
    return NamedSharding(mesh, logical_to_spec(names, shape, mesh, rules))


def _is_var(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


def param_shardings(params: nnx.State, mesh: Mesh, rules: Rules | None = None) -> nnx.State:
    """A State of NamedShardings matching `params` (arrays or ShapeDtypeStructs with logical names)."""
    return jax.tree.map(lambda v: v.replace(_variable_sharding(v, mesh, rules)), params, is_leaf=_is_var)


def shard_params(params: nnx.State, mesh: Mesh, rules: Rules | None = None) -> nnx.State:
    """Place params on the mesh by their logical names."""
    shardings = param_shardings(params, mesh, rules)
    return jax.device_put(params, shardings)


def tree_shardings(tree: Any, mesh: Mesh, rules: Rules | None = None) -> Any:
    """Shardings for any pytree: an nnx Variable's array by its logical names, every other array replicated."""
    def one(x):
        if _is_var(x):
            return x.replace(_variable_sharding(x, mesh, rules))
        return NamedSharding(mesh, P())
    return jax.tree.map(one, tree, is_leaf=_is_var)


def like_params_shardings(tree: Any, params: Any, param_sharding: Any, mesh: Mesh) -> Any:
    """Shardings for a tree that holds per-parameter slots (an optax state: adam's mu and nu, momentum, ...).

    A leaf whose key path ends with a parameter's key path and has that parameter's shape gets the
    parameter's sharding (the longest matching path wins); every other leaf (counts, scalars, factored
    statistics of another shape) is replicated. Matching by path rather than by tree structure also covers
    `optax.chain`, `optax.masked` and `optax.multi_transform` states.
    """
    table: dict[tuple, tuple[tuple[int, ...], Any]] = {}
    shard_leaves = jax.tree.leaves(param_sharding, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))
    param_leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    if len(shard_leaves) != len(param_leaves):
        raise ValueError(f"param shardings with {len(shard_leaves)} leaves: expected one per parameter "
                         f"({len(param_leaves)})")
    for (path, leaf), sharding in zip(param_leaves, shard_leaves):
        table[tuple(path)] = (tuple(leaf.shape), sharding)
    replicated = NamedSharding(mesh, P())

    def one(path, leaf):
        path, shape = tuple(path), tuple(getattr(leaf, "shape", ()))
        for start in range(len(path)):
            hit = table.get(path[start:])
            if hit is not None and hit[0] == shape:
                return hit[1]
        return replicated

    return jax.tree_util.tree_map_with_path(one, tree)


def train_state_shardings(state: Any, mesh: Mesh, rules: Rules | None = None) -> Any:
    """Shardings for a `core.train.TrainState` (arrays or ShapeDtypeStructs from `jax.eval_shape`).

    params: by their logical names under `rules`; opt_state: each leaf like the parameter it belongs to
    (`like_params_shardings`), scalars such as adam's count replicated; step and key replicated; `frozen`
    (when the state has that field and it is set): nnx Variables by their logical names, other arrays
    replicated. Returns the same NamedTuple type, ready for `make_train_step(state_sharding=...)`.
    """
    for field in ("params", "opt_state", "step", "key"):
        if not hasattr(state, field):
            raise ValueError(f"state of type {type(state).__name__}: expected a TrainState with params, "
                             f"opt_state, step and key")
    replicated = NamedSharding(mesh, P())
    params = tree_shardings(state.params, mesh, rules)
    fields: dict[str, Any] = dict(
        params=params, opt_state=like_params_shardings(state.opt_state, state.params, params, mesh),
        step=replicated, key=replicated)
    if "frozen" in getattr(state, "_fields", ()):
        fields["frozen"] = None if state.frozen is None else tree_shardings(state.frozen, mesh, rules)
    return state._replace(**fields)


def shard_train_state(state: Any, mesh: Mesh, rules: Rules | None = None) -> Any:
    """Place an existing train state on the mesh by `train_state_shardings` (works across processes)."""
    return core_sharding.place(state, train_state_shardings(state, mesh, rules))


def _active_mesh():
    """The mesh set by `jax.set_mesh` (as an AbstractMesh, also inside jit tracing) or None."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh is None or not mesh.shape:
        return None
    return mesh


def constrain(x: jax.Array, names: Sequence[str | None], rules: Rules | None = None) -> jax.Array:
    """`x` with its layout pinned by logical names, e.g. ("batch", "seq", "embed") for the residual stream.

    Under an active mesh (`with jax.set_mesh(mesh):` around the call that traces), this is
    `jax.lax.with_sharding_constraint` with the spec from `rules` (ACTIVATION_RULES by default: batch over
    "data"); a dimension the axis does not divide stays replicated, mesh axes in Manual mode (inside
    `shard_map`) are left alone, and when no dimension maps to an axis `x` is returned unconstrained. With no
    mesh (one-device jit, plain generation) it returns `x` unchanged. x: any shape, len(names) == x.ndim.
    """
    if len(names) != x.ndim:
        raise ValueError(f"constrain names {tuple(names)}: expected one per dimension of x with shape {x.shape}")
    mesh = _active_mesh()
    if mesh is None:
        return x
    manual = {n for n, t in zip(mesh.axis_names, mesh.axis_types) if t == AxisType.Manual}
    table = [(k, None if v in manual else v) for k, v in (rules if rules is not None else ACTIVATION_RULES)]
    spec = logical_to_spec(tuple(names), x.shape, mesh, table)
    if all(axis is None for axis in spec):
        return x
    return jax.lax.with_sharding_constraint(x, spec)
