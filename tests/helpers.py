"""Shared test helpers: pytree comparison and a compile counter."""

from __future__ import annotations

import contextlib

import jax
import numpy as np


def assert_trees_close(actual, expected, *, atol: float = 1e-5, rtol: float = 1e-5, exact: bool = False) -> None:
    """Assert two pytrees have the same structure and (bitwise, with `exact`) close leaves."""
    a_leaves, a_def = jax.tree.flatten(actual)
    e_leaves, e_def = jax.tree.flatten(expected)
    assert a_def == e_def, f"tree structures differ:\n{a_def}\n{e_def}"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if isinstance(a, jax.Array) and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, e = jax.random.key_data(a), jax.random.key_data(e)
        a, e = np.asarray(jax.device_get(a)), np.asarray(jax.device_get(e))
        assert a.shape == e.shape, f"leaf {i}: shape {a.shape} != {e.shape}"
        if exact:
            np.testing.assert_array_equal(a, e, err_msg=f"leaf {i} differs")
        else:
            np.testing.assert_allclose(a, e, atol=atol, rtol=rtol, err_msg=f"leaf {i} differs")


class CompileCounter(contextlib.AbstractContextManager):
    """Counts XLA backend compilations inside the block, e.g. to assert that a loop never recompiles."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self):
        self.count = 0

    def _listener(self, event: str, duration: float, **kwargs) -> None:
        if event == self.EVENT:
            self.count += 1

    def __enter__(self):
        jax.monitoring.register_event_duration_secs_listener(self._listener)
        return self

    def __exit__(self, *exc):
        from jax._src import monitoring  # the public module has no unregister yet
        monitoring.unregister_event_duration_listener(self._listener)
        return False
