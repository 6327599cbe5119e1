"""Task streams: split-by-classes (class- and task-incremental) and permuted inputs (domain-incremental).

A Stream is a list of numpy Tasks; `stack_stream` pads them to common sizes so that one jitted program serves
every task (counts say how many rows are real).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class Task(NamedTuple):
    train_x: np.ndarray   # (n, *input_shape) float32
    train_y: np.ndarray   # (n,) int32
    test_x: np.ndarray
    test_y: np.ndarray
    classes: np.ndarray   # (k,) int32: the labels this task uses (task-IL masks the head to these)


class Stream(NamedTuple):
    tasks: list[Task]
    num_classes: int
    scenario: str         # "class" (split: class- and task-IL evaluated) or "domain" (permuted)


def split_by_classes(train_x, train_y, test_x, test_y, *, classes_per_task: int = 2,
                     class_order: Sequence[int] | None = None) -> Stream:
    """Split a labelled set into tasks of `classes_per_task` disjoint classes (Split MNIST: 5 x 2)."""
    labels = np.unique(train_y)
    order = np.asarray(labels if class_order is None else class_order)
    if set(order.tolist()) != set(labels.tolist()):
        raise ValueError(f"class_order={order.tolist()}, expected a permutation of {labels.tolist()}")
    if classes_per_task < 1 or len(order) % classes_per_task:
        raise ValueError(f"classes_per_task={classes_per_task}, expected a divisor of {len(order)} classes")
    tasks = []
    for start in range(0, len(order), classes_per_task):
        cls = order[start:start + classes_per_task].astype(np.int32)
        tr, te = np.isin(train_y, cls), np.isin(test_y, cls)
        tasks.append(Task(train_x[tr].astype(np.float32), train_y[tr].astype(np.int32),
                          test_x[te].astype(np.float32), test_y[te].astype(np.int32), cls))
    return Stream(tasks, int(labels.max()) + 1, "class")


def permuted_tasks(train_x, train_y, test_x, test_y, *, num_tasks: int, seed: int = 0,
                   first_identity: bool = True) -> Stream:
    """Permuted inputs: task t applies a fixed random pixel permutation to every image (domain-IL)."""
    if num_tasks < 1:
        raise ValueError(f"num_tasks={num_tasks}, expected >= 1")
    rng = np.random.default_rng(seed)
    flat_tr = train_x.reshape(len(train_x), -1).astype(np.float32)
    flat_te = test_x.reshape(len(test_x), -1).astype(np.float32)
    d = flat_tr.shape[1]
    classes = np.unique(train_y).astype(np.int32)
    tasks = []
    for t in range(num_tasks):
        perm = np.arange(d) if (t == 0 and first_identity) else rng.permutation(d)
        tasks.append(Task(flat_tr[:, perm], train_y.astype(np.int32), flat_te[:, perm],
                          test_y.astype(np.int32), classes))
    return Stream(tasks, int(classes.max()) + 1, "domain")


def stack_stream(stream: Stream) -> dict[str, np.ndarray]:
    """Pad every task to the largest one: train_x (T, N, ...), train_n (T,), test_x (T, M, ...), test_n (T,),
    class_mask (T, C) with 1 for the task's classes."""
    tasks = stream.tasks
    n_max = max(len(t.train_y) for t in tasks)
    m_max = max(len(t.test_y) for t in tasks)

    def pad(a, n):
        out = np.zeros((n, *a.shape[1:]), a.dtype)
        out[:len(a)] = a
        return out

    mask = np.zeros((len(tasks), stream.num_classes), np.float32)
    for i, t in enumerate(tasks):
        mask[i, t.classes] = 1.0
    return {
        "train_x": np.stack([pad(t.train_x, n_max) for t in tasks]),
        "train_y": np.stack([pad(t.train_y, n_max) for t in tasks]),
        "train_n": np.array([len(t.train_y) for t in tasks], np.int32),
        "test_x": np.stack([pad(t.test_x, m_max) for t in tasks]),
        "test_y": np.stack([pad(t.test_y, m_max) for t in tasks]),
        "test_n": np.array([len(t.test_y) for t in tasks], np.int32),
        "class_mask": mask,
    }
