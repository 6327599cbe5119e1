"""The shared test helpers must themselves be able to fail."""

import jax
import numpy as np
import pytest
from helpers import CompileCounter, assert_trees_close


def test_compile_counter_counts_new_compilations_only():
    f = jax.jit(lambda x: x * 3 + 1)
    five, other_five, six = np.ones(5, np.float32), np.zeros(5, np.float32), np.ones(6, np.float32)
    with CompileCounter() as first:
        f(five)
    with CompileCounter() as cached:
        f(other_five)
    with CompileCounter() as new_shape:
        f(six)
    assert (first.count, cached.count, new_shape.count) == (1, 0, 1)


def test_assert_trees_close_detects_differences():
    tree = {"a": np.ones(3), "key": jax.random.key(0)}
    assert_trees_close(tree, {"a": np.ones(3), "key": jax.random.key(0)}, exact=True)
    with pytest.raises(AssertionError, match="leaf"):
        assert_trees_close(tree, {"a": np.ones(3) + 1e-3, "key": jax.random.key(0)})
    with pytest.raises(AssertionError, match="leaf"):
        assert_trees_close(tree, {"a": np.ones(3), "key": jax.random.key(1)}, exact=True)
    with pytest.raises(AssertionError, match="structures differ"):
        assert_trees_close(tree, {"a": np.ones(3)})
