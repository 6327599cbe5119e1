"""What every Pallas kernel in the project shares: the interpret-mode default, the GPU compiler choice, and a
check that a kernel lowers to Triton for a CUDA GPU, which runs on a machine without one.

Pallas on an NVIDIA GPU has two backends. Recent JAX picks Mosaic GPU unless the call names Triton's compiler
parameters; our kernels are written for the Triton lowering (power-of-two blocks, 2-D dots, no gathers), so every
compiled GPU call passes :func:`gpu_compiler_params`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from jax.experimental.pallas import triton as pl_triton

TRITON_CALL = "__gpu$xla.gpu.triton"


def default_interpret() -> bool:
    """Interpret mode where no accelerator compiles Pallas (the CPU)."""
    return jax.default_backend() == "cpu"


def gpu_compiler_params(num_warps: int | None = None, num_stages: int | None = None):
    """Triton compiler parameters for a compiled (non-interpret) call; None on TPU, which takes Mosaic's own."""
    if jax.default_backend() == "tpu":
        return None
    return pl_triton.CompilerParams(num_warps=num_warps, num_stages=num_stages)


def lowers_for_cuda(fn: Callable, *args) -> str:
    """Lower ``fn(*args)`` (jitted, kernels not in interpret mode) for a CUDA GPU on any host and return the
    StableHLO text, in which each Pallas kernel appears as a Triton custom call. Raises what the Triton lowering
    raises (a non-power-of-two block, a primitive Triton lacks), so a test here catches what only a GPU compile
    would otherwise show. Triton's own compile to PTX still needs the GPU."""
    from jax import export

    exported = export.export(jax.jit(fn), platforms=["cuda"],
                             disabled_checks=[export.DisabledSafetyCheck.custom_call(TRITON_CALL)])(*args)
    return exported.mlir_module()


def triton_modules(fn: Callable, *args) -> list[str]:
    """The Triton IR (TTIR) of each Pallas kernel that ``fn(*args)`` lowers to for a CUDA GPU, as text, in lowering
    order (for a gradient through a custom VJP: the forward kernel, then the backward one). Runs on any host; the
    size of these programs is what Triton's compile time grows with. Reads the pinned jax's Triton lowering
    (a private module), so a jax upgrade may need this updated."""
    from unittest import mock

    from jax._src.pallas.triton import lowering

    modules = []
    lower = lowering.lower_jaxpr_to_triton_module

    def capture(*a, **kw):
        result = lower(*a, **kw)
        modules.append(result.module.operation.get_asm())
        return result

    with mock.patch.object(lowering, "lower_jaxpr_to_triton_module", capture):
        lowers_for_cuda(fn, *args)
    return modules


def op_count(module_text: str) -> int:
    """Operations in a printed MLIR module that define a value (every op but stores, yields and returns)."""
    return sum(" = " in line for line in module_text.splitlines())
