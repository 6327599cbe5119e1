"""Meshes and placement: one code path for 1 device, 8 fake CPU devices, and a multi-host pod.

Axes are `"data"` (batch) and `"model"` (parameters). Batches come from each process's own loader and are
assembled into global arrays with `jax.make_array_from_process_local_data`, so the same training step runs
under JAX's single- and multi-controller runtimes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from core.config import BadInputError

DATA, MODEL = "data", "model"


def make_mesh(data: int = -1, model: int = 1, *, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ("data", "model") mesh over `devices` (all global devices by default); `data=-1` takes the rest."""
    devices = list(devices if devices is not None else jax.devices())
    n = len(devices)
    if model < 1 or n % model:
        raise BadInputError(f"mesh model={model}: expected a positive divisor of the {n} devices")
    if data == -1:
        data = n // model
    if data * model != n:
        raise BadInputError(f"mesh data={data} x model={model} = {data * model}: expected {n} devices in all")
    return jax.make_mesh((data, model), (DATA, MODEL), axis_types=(AxisType.Auto, AxisType.Auto),
                         devices=devices)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) axis split over "data", the rest replicated."""
    return NamedSharding(mesh, P(DATA))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def shard_batch(batch: Any, mesh: Mesh) -> Any:
    """Place this process's slice of a global batch (a pytree of host arrays) on the mesh, split on "data"."""
    sharding = batch_sharding(mesh)
    for leaf in jax.tree.leaves(batch):
        global_rows = np.shape(leaf)[0] * jax.process_count()
        if global_rows % mesh.shape[DATA]:
            raise BadInputError(f"batch of {global_rows} rows: expected a multiple of the mesh's data axis "
                             f"({mesh.shape[DATA]} devices)")
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), batch)


def replicate(tree: Any, mesh: Mesh) -> Any:
    """Copy a pytree to every device of the mesh (works across processes: every process holds the same tree)."""
    return place(tree, jax.tree.map(lambda _: replicated(mesh), tree))


def place(tree: Any, shardings: Any) -> Any:
    """Put each leaf on its sharding; host values identical on every process become global arrays."""
    if jax.process_count() == 1:
        return jax.device_put(tree, shardings)

    def put(x, sharding):
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            data = np.asarray(jax.random.key_data(x))
            impl = jax.random.key_impl(x)
            wrapped = put(data, NamedSharding(sharding.mesh, P(*sharding.spec, None)))
            return jax.random.wrap_key_data(wrapped, impl=impl)
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(put, tree, shardings)


def initialize_distributed(coordinator_address: str | None = None, num_processes: int | None = None,
                           process_id: int | None = None) -> bool:
    """Start JAX's multi-controller runtime when asked to (arguments or JAX_COORDINATOR_ADDRESS,
    JAX_NUM_PROCESSES, JAX_PROCESS_ID); on CPU, collectives go through gloo. Returns whether it started."""
    coordinator_address = coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS")
    if not coordinator_address:
        return False
    num_processes = num_processes if num_processes is not None else int(os.environ.get("JAX_NUM_PROCESSES", "1"))
    process_id = process_id if process_id is not None else int(os.environ.get("JAX_PROCESS_ID", "0"))
    if not 0 <= process_id < num_processes:
        raise ValueError(f"process_id={process_id}: expected 0 <= id < num_processes={num_processes}")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id)
    return True
