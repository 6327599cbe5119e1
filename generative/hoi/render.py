"""Frame strips (PNG) of a 2D-scene episode: room, table, door, box, torso, arm and the goal, at evenly spaced
steps."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Circle, Rectangle

from generative.hoi import scene2d


def _draw(ax, phys: scene2d.Phys, t: int, goal: Sequence[float] | None, title: str) -> None:
    ax.set_xlim(-scene2d.ROOM, scene2d.ROOM)
    ax.set_ylim(-scene2d.ROOM, scene2d.ROOM)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    (cx, cy), (hx, hy) = scene2d.TABLE_C, scene2d.TABLE_H
    ax.add_patch(Rectangle((cx - hx, cy - hy), 2 * hx, 2 * hy, color="tan"))
    hinge = np.asarray(scene2d.HINGE)
    theta = float(phys.door)
    tip = hinge + scene2d.DOOR_LEN * np.array([np.cos(theta), np.sin(theta)])
    ax.plot([hinge[0], tip[0]], [hinge[1], tip[1]], color="saddlebrown", lw=3)
    handle = hinge + scene2d.HANDLE_AT * np.array([np.cos(theta), np.sin(theta)])
    ax.add_patch(Circle(handle, scene2d.R_HANDLE, color="black"))
    if goal is not None:
        ax.plot(goal[0], goal[1], marker="x", color="green", ms=8, mew=2)
    box_colour = "orange" if float(phys.box_up) > 0 else "peru"
    ax.add_patch(Circle(np.asarray(phys.box_p), scene2d.R_BOX, color=box_colour))
    torso = np.asarray(phys.torso_p)
    q = np.asarray(phys.q)
    elbow = torso + scene2d.L1 * np.array([np.cos(q[0]), np.sin(q[0])])
    hand = elbow + scene2d.L2 * np.array([np.cos(q[0] + q[1]), np.sin(q[0] + q[1])])
    ax.add_patch(Circle(torso, scene2d.R_TORSO, color="steelblue"))
    ax.plot([torso[0], elbow[0], hand[0]], [torso[1], elbow[1], hand[1]], color="navy", lw=2)
    gripping = float(phys.grip_box) + float(phys.grip_handle) > 0
    ax.add_patch(Circle(hand, scene2d.R_HAND, color="red" if gripping else "navy"))
    ax.set_title(f"{title} t={t}", fontsize=7)


def frame_strip(path: str | pathlib.Path, states: scene2d.Phys, *, frames: int = 8,
                goal: Sequence[float] | None = None, title: str = "") -> pathlib.Path:
    """states: a Phys whose leaves have a leading time axis (T, ...); `frames` evenly spaced steps drawn."""
    T = np.asarray(states.box_p).shape[0]
    steps = np.linspace(0, T - 1, frames).round().astype(int)
    fig = Figure(figsize=(1.6 * frames, 1.8))
    axes = fig.subplots(1, frames, squeeze=False)[0]
    for ax, t in zip(axes, steps):
        phys = scene2d.Phys(*(np.asarray(x)[t] for x in states))
        _draw(ax, phys, int(t), goal, title)
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return path
