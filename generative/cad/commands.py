"""The DeepCAD command language: sketch curves (line, arc, circle) in loops, loops in a sketch profile,
extrusions with a boolean and an extent on a sketch plane, and the (N, 17) vector form with 8-bit arguments.

A program is a list of `Extrusion`s; each carries its profile (loops of curves in the sketch plane's 2-D
frame), the plane (Euler angles theta, phi, gamma and an origin), a sketch scale, two extents, a boolean and
an extent type. The vector form follows DeepCAD (Wu et al. 2021, Sec. 3.1): one row per command, column 0 the
command type (Line, Arc, Circle, EOS, SOL, Ext), columns 1..16 the arguments
x, y, alpha, f, r, theta, phi, gamma, p_x, p_y, p_z, s, e1, e2, b, u, with -1 where a command has no such
argument. A loop is `SOL` followed by its curves; an extrusion is its loops followed by `Ext`; `EOS` ends.

Conventions (ours, fixed for this package):
- lengths live in the normalised frame [-1, 1]; quantised to 256 levels as level = round(128 (v + 1)), so
  level 128 is 0 and one level is 1/128 (`STEP`); the procedural corpus states dimensions in millimetres with
  1 mm = one level, so every corpus value is exactly on the grid;
- angles (alpha, theta, phi, gamma) are quantised over [-pi, pi) the same way (one level = pi / 128), the arc
  sweep alpha over (0, 2 pi) as level = round(128 alpha / pi);
- the sketch scale s is quantised over [0, 2) (level 128 = 1);
- f (arc direction, 1 = counter-clockwise), b and u are categorical levels stored as they are.
A curve's start point is the previous curve's end point, and the first curve of a loop starts at the loop's
last end point, so a loop of lines or arcs is closed by construction (DeepCAD's rule).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from core.config import ConfigError

LINE, ARC, CIRCLE, EOS, SOL, EXT = range(6)
COMMANDS = ("Line", "Arc", "Circle", "EOS", "SOL", "Ext")
ARGS = ("x", "y", "alpha", "f", "r", "theta", "phi", "gamma", "px", "py", "pz", "s", "e1", "e2", "b", "u")
N_ARGS = len(ARGS)
PAD = -1
LEVELS = 256
STEP = 1.0 / 128.0  # one quantisation level of a length in the normalised frame
BOOLEANS = ("NewBody", "Join", "Cut", "Intersect")
EXTENTS = ("OneSide", "Symmetric", "TwoSides")
NEW, JOIN, CUT, INTERSECT = range(4)
ONE_SIDE, SYMMETRIC, TWO_SIDES = range(3)
# DeepCAD's limits on a sequence.
MAX_COMMANDS, MAX_EXTRUSIONS, MAX_LOOPS, MAX_CURVES = 60, 10, 6, 15

# Which arguments each command uses (DeepCAD's per-command argument mask).
ARG_MASK = np.zeros((6, N_ARGS), bool)
ARG_MASK[LINE, [0, 1]] = True
ARG_MASK[ARC, [0, 1, 2, 3]] = True
ARG_MASK[CIRCLE, [0, 1, 4]] = True
ARG_MASK[EXT, 5:] = True


class CADError(ConfigError):
    """A program that is not valid CAD: bad vector, self-intersecting loop, degenerate arc, empty solid."""


@dataclasses.dataclass(frozen=True)
class Line:
    x: float  # end point in the sketch frame
    y: float


@dataclasses.dataclass(frozen=True)
class Arc:
    x: float  # end point
    y: float
    sweep: float  # radians, in (0, 2 pi)
    ccw: bool = True


@dataclasses.dataclass(frozen=True)
class Circle:
    x: float  # centre
    y: float
    r: float


Curve = Line | Arc | Circle


@dataclasses.dataclass(frozen=True)
class Plane:
    theta: float = 0.0
    phi: float = 0.0
    gamma: float = 0.0
    origin: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def frame(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x axis, y axis, normal) of R = Rz(phi) Ry(theta) Rz(gamma) applied to the world axes."""
        def rz(a):
            c, s = math.cos(a), math.sin(a)
            return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])

        c, s = math.cos(self.theta), math.sin(self.theta)
        ry = np.array([[c, 0, s], [0, 1.0, 0], [-s, 0, c]])
        rot = rz(self.phi) @ ry @ rz(self.gamma)
        return rot[:, 0], rot[:, 1], rot[:, 2]


XY = Plane()
XZ = Plane(theta=math.pi / 2, phi=-math.pi / 2, gamma=math.pi / 2)  # normal -y, x axis +x, y axis +z
YZ = Plane(theta=math.pi / 2, phi=0.0, gamma=math.pi / 2)  # normal +x, x axis +y, y axis +z


@dataclasses.dataclass(frozen=True)
class Extrusion:
    loops: tuple[tuple[Curve, ...], ...]
    plane: Plane = XY
    e1: float = 0.1
    e2: float = 0.0
    boolean: int = NEW
    extent: int = ONE_SIDE
    scale: float = 1.0


Program = tuple[Extrusion, ...]


# --- quantisation -------------------------------------------------------------------------------------------

def quantize_length(v: float) -> int:
    return int(np.clip(round(128.0 * (v + 1.0)), 0, LEVELS - 1))


def dequantize_length(q: int) -> float:
    return q / 128.0 - 1.0


def quantize_angle(a: float) -> int:
    a = (a + math.pi) % (2 * math.pi) - math.pi
    return int(np.clip(round(128.0 * (a / math.pi + 1.0)), 0, LEVELS - 1))


def dequantize_angle(q: int) -> float:
    return (q / 128.0 - 1.0) * math.pi


def quantize_sweep(a: float) -> int:
    return int(np.clip(round(128.0 * a / math.pi), 0, LEVELS - 1))


def dequantize_sweep(q: int) -> float:
    return q * math.pi / 128.0


def quantize_scale(s: float) -> int:
    return int(np.clip(round(128.0 * s), 0, LEVELS - 1))


def dequantize_scale(q: int) -> float:
    return q / 128.0


# --- program <-> vector -------------------------------------------------------------------------------------

def _row(cmd: int, **args: float) -> np.ndarray:
    row = np.full(1 + N_ARGS, PAD, np.int64)
    row[0] = cmd
    for name, value in args.items():
        row[1 + ARGS.index(name)] = value
    return row


def to_vector(program: Program, *, quantize: bool = True) -> np.ndarray:
    """(N, 17) int64 DeepCAD vector of quantised arguments (`quantize=False` is not supported for storage:
    the vector form is always 8-bit)."""
    if not quantize:
        raise ValueError("quantize=False: the DeepCAD vector form stores 8-bit levels only")
    rows = []
    for ext in program:
        for loop in ext.loops:
            rows.append(_row(SOL))
            for c in loop:
                if isinstance(c, Line):
                    rows.append(_row(LINE, x=quantize_length(c.x), y=quantize_length(c.y)))
                elif isinstance(c, Arc):
                    rows.append(_row(ARC, x=quantize_length(c.x), y=quantize_length(c.y),
                                     alpha=quantize_sweep(c.sweep), f=int(c.ccw)))
                elif isinstance(c, Circle):
                    rows.append(_row(CIRCLE, x=quantize_length(c.x), y=quantize_length(c.y),
                                     r=quantize_length(c.r)))
                else:
                    raise CADError(f"curve {c!r}: expected Line, Arc or Circle")
        p = ext.plane
        rows.append(_row(EXT, theta=quantize_angle(p.theta), phi=quantize_angle(p.phi), gamma=quantize_angle(p.gamma),
                         px=quantize_length(p.origin[0]), py=quantize_length(p.origin[1]),
                         pz=quantize_length(p.origin[2]), s=quantize_scale(ext.scale), e1=quantize_length(ext.e1),
                         e2=quantize_length(ext.e2), b=ext.boolean, u=ext.extent))
    rows.append(_row(EOS))
    return np.stack(rows)


def check_vector(vec: np.ndarray) -> None:
    """Shape, command types, argument masks and ranges of a DeepCAD vector; raises CADError."""
    vec = np.asarray(vec)
    if vec.ndim != 2 or vec.shape[1] != 1 + N_ARGS:
        raise CADError(f"vector of shape {vec.shape}: expected (N, {1 + N_ARGS})")
    for i, row in enumerate(vec):
        cmd = int(row[0])
        if cmd not in range(6):
            raise CADError(f"row {i}: command {cmd}: expected 0..5 ({', '.join(COMMANDS)})")
        args = row[1:]
        used = ARG_MASK[cmd]
        stray = np.flatnonzero(~used & (args != PAD))
        if stray.size:
            raise CADError(f"row {i} ({COMMANDS[cmd]}): arguments {[ARGS[j] for j in stray]} set: expected -1 "
                           f"outside {[ARGS[j] for j in np.flatnonzero(used)]}")
        if np.any((args[used] < 0) | (args[used] >= LEVELS)):
            raise CADError(f"row {i} ({COMMANDS[cmd]}): arguments {args[used].tolist()}: expected levels 0..255")
        if cmd == ARC and args[3] not in (0, 1):
            raise CADError(f"row {i} (Arc): f={args[3]}: expected 0 or 1")
        if cmd == EXT and (args[14] not in range(4) or args[15] not in range(3)):
            raise CADError(f"row {i} (Ext): b={args[14]}, u={args[15]}: expected b in 0..3 {BOOLEANS}, "
                           f"u in 0..2 {EXTENTS}")


def from_vector(vec: np.ndarray) -> Program:
    """Parse a DeepCAD vector into a program; structural errors (a curve outside a loop, a loop without its
    extrusion, no EOS) raise CADError naming the row."""
    vec = np.asarray(vec).astype(np.int64)
    check_vector(vec)
    program: list[Extrusion] = []
    loops: list[list[Curve]] = []
    ended = False
    for i, row in enumerate(vec):
        cmd, a = int(row[0]), row[1:]
        if ended:
            if cmd != EOS:
                raise CADError(f"row {i} ({COMMANDS[cmd]}) after EOS: expected only EOS padding")
            continue
        if cmd == SOL:
            loops.append([])
        elif cmd in (LINE, ARC, CIRCLE):
            if not loops:
                raise CADError(f"row {i} ({COMMANDS[cmd]}): a curve before any SOL: expected SOL to open a loop")
            x, y = dequantize_length(int(a[0])), dequantize_length(int(a[1]))
            if cmd == LINE:
                loops[-1].append(Line(x, y))
            elif cmd == ARC:
                loops[-1].append(Arc(x, y, dequantize_sweep(int(a[2])), bool(a[3])))
            else:
                loops[-1].append(Circle(x, y, dequantize_length(int(a[4]))))
        elif cmd == EXT:
            if not loops:
                raise CADError(f"row {i} (Ext): an extrusion without a sketch: expected SOL and curves before it")
            plane = Plane(dequantize_angle(int(a[5])), dequantize_angle(int(a[6])), dequantize_angle(int(a[7])),
                          (dequantize_length(int(a[8])), dequantize_length(int(a[9])), dequantize_length(int(a[10]))))
            program.append(Extrusion(tuple(tuple(lp) for lp in loops), plane, dequantize_length(int(a[12])),
                                     dequantize_length(int(a[13])), int(a[14]), int(a[15]),
                                     dequantize_scale(int(a[11]))))
            loops = []
        else:  # EOS
            if loops:
                raise CADError(f"row {i} (EOS): {len(loops)} loop(s) not extruded: expected Ext before EOS")
            ended = True
    if not ended:
        raise CADError(f"vector of {len(vec)} rows ends without EOS: expected a final EOS row")
    if not program:
        raise CADError("empty program: expected at least one extrusion")
    return tuple(program)


def quantize_program(program: Program) -> Program:
    """The program as its 8-bit vector sees it (what a model trained on vectors can produce)."""
    return from_vector(to_vector(program))


def count_commands(program: Program) -> dict[str, int]:
    out = {"line": 0, "arc": 0, "circle": 0, "extrusion": len(program), "loops": 0}
    for ext in program:
        out["loops"] += len(ext.loops)
        for loop in ext.loops:
            for c in loop:
                out[type(c).__name__.lower()] += 1
    return out


def check_limits(program: Program) -> None:
    """DeepCAD's sequence limits (60 commands, 10 extrusions, 6 loops per sketch, 15 curves per loop)."""
    if len(program) > MAX_EXTRUSIONS:
        raise CADError(f"{len(program)} extrusions: expected at most {MAX_EXTRUSIONS}")
    for k, ext in enumerate(program):
        if len(ext.loops) > MAX_LOOPS:
            raise CADError(f"extrusion {k}: {len(ext.loops)} loops: expected at most {MAX_LOOPS}")
        for j, loop in enumerate(ext.loops):
            if len(loop) > MAX_CURVES:
                raise CADError(f"extrusion {k} loop {j}: {len(loop)} curves: expected at most {MAX_CURVES}")
    n = len(to_vector(program))
    if n > MAX_COMMANDS:
        raise CADError(f"{n} commands: expected at most {MAX_COMMANDS}")


def vectors_equal(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.all(a == b))
