"""Continual-learning core: task streams, a reservoir replay buffer on the device, and CL metrics.

Shared by continual-learning methods (DEDUCE first); everything here is pure numpy (streams, metrics) or pure
jitted JAX over pytrees (buffer).
"""

from optimization.continual.buffer import Buffer, init_buffer, reservoir_add, sample_indices
from optimization.continual.metrics import (
    average_accuracy,
    backward_transfer,
    forgetting,
    forward_transfer,
    summarize,
)
from optimization.continual.streams import Stream, Task, permuted_tasks, split_by_classes, stack_stream

__all__ = [
    "Buffer", "init_buffer", "reservoir_add", "sample_indices",
    "average_accuracy", "backward_transfer", "forgetting", "forward_transfer", "summarize",
    "Stream", "Task", "permuted_tasks", "split_by_classes", "stack_stream",
]
