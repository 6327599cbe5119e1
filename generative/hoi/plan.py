"""Relative Movement Dynamics (RMD) plans: a time-ordered list of sub-tasks, each a bipartite set of edges between
human parts and object parts plus an optional object goal, and the JSON schema that carries them.

An RMD plan (the paper's "RMD diagram per sub-task", arXiv 2503.18349; the exact schema is not published, this
one follows the project's method note):

    {"command": "carry box to table",
     "subtasks": [
        {"name": "reach", "edges": [{"human": "hand", "object": "box", "relation": "approach", "distance": 0.0}]},
        {"name": "carry", "edges": [{"human": "hand", "object": "box", "relation": "contact", "grasp": true},
                                    {"human": "hand", "object": "box", "relation": "move_with", "grasp": true}],
         "goal": {"object": "box", "target": "table"}},
        {"name": "place", "edges": [{"human": "hand", "object": "box", "relation": "release"}],
         "goal": {"object": "box", "target": "table"}, "hold_steps": 5}]}

Relations: approach (distance <= `distance`), contact (distance <= the contact tolerance, with the gripper
engaged when `grasp`), move_with (contact and relative velocity ~ 0), release (gripper off and distance >=
`distance`), keep_distance (distance >= `distance`), hold_still (the object's speed ~ 0). Goals: a box
position `{"object": "box", "target": [x, y]}`, a box on the table `{"object": "box", "target": "table"}`, a
door angle `{"object": "door", "angle": a}` (opened at least to a). `validate` raises BadInputError naming the
bad field (`subtasks[1].edges[0].relation='hug': expected one of ...`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

from core.config import BadInputError

HUMAN_PARTS = ("hand", "torso")
OBJECT_PARTS = ("box", "handle")
RELATIONS = ("approach", "contact", "move_with", "release", "keep_distance", "hold_still")
GOAL_OBJECTS = {"box": ("target",), "door": ("angle",)}
MAX_SUBTASKS = 6  # static shapes of the compiled plan
MAX_EDGES = 3
DEFAULT_HOLD = 3  # consecutive steps a completion test must hold


@dataclasses.dataclass(frozen=True, kw_only=True)
class Edge:
    """One bipartite edge: a relation between a human part and an object part."""

    human: str
    object: str
    relation: str
    distance: float = 0.0  # approach: target distance; release / keep_distance: minimum distance
    grasp: bool = False  # contact / move_with: the gripper must be engaged on the object


@dataclasses.dataclass(frozen=True, kw_only=True)
class Goal:
    """An object goal: a box position (x, y), the box on the table, or a door opening angle (rad)."""

    object: str
    position: tuple[float, float] | None = None
    on_table: bool = False
    angle: float | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class SubTask:
    name: str
    edges: tuple[Edge, ...]
    goal: Goal | None = None
    hold_steps: int = DEFAULT_HOLD


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    command: str
    subtasks: tuple[SubTask, ...]

    def to_json(self) -> dict[str, Any]:
        return plan_to_json(self)


def _bad(path: str, value: Any, expected: str) -> BadInputError:
    return BadInputError(f"{path}={value!r}: expected {expected}")


def _number(value: Any, path: str, *, low: float = -math.inf, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise _bad(path, value, f"a number in [{low:g}, {high:g}]")
    return float(value)


def _keys(obj: Any, path: str, allowed: set[str], required: set[str]) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise _bad(path, obj, "an object")
    for key in obj:
        if key not in allowed:
            raise _bad(f"{path}.{key}", obj[key], f"no such field (allowed: {', '.join(sorted(allowed))})")
    for key in sorted(required):
        if key not in obj:
            raise _bad(f"{path}.{key}", None, "a value (the field is required)")
    return obj


def _edge(obj: Any, path: str) -> Edge:
    _keys(obj, path, {"human", "object", "relation", "distance", "grasp"}, {"human", "object", "relation"})
    if obj["human"] not in HUMAN_PARTS:
        raise _bad(f"{path}.human", obj["human"], f"one of {HUMAN_PARTS}")
    if obj["object"] not in OBJECT_PARTS:
        raise _bad(f"{path}.object", obj["object"], f"one of {OBJECT_PARTS}")
    if obj["relation"] not in RELATIONS:
        raise _bad(f"{path}.relation", obj["relation"], f"one of {RELATIONS}")
    distance = _number(obj.get("distance", 0.0), f"{path}.distance", low=0.0, high=5.0)
    grasp = obj.get("grasp", False)
    if not isinstance(grasp, bool):
        raise _bad(f"{path}.grasp", grasp, "true or false")
    if grasp and obj["relation"] not in ("contact", "move_with"):
        raise _bad(f"{path}.grasp", grasp, f"false for relation {obj['relation']!r} (only contact / move_with grasp)")
    if grasp and obj["human"] != "hand":
        raise _bad(f"{path}.grasp", grasp, "false for the torso (only the hand grasps)")
    return Edge(human=obj["human"], object=obj["object"], relation=obj["relation"], distance=distance, grasp=grasp)


def _goal(obj: Any, path: str) -> Goal | None:
    if obj is None:
        return None
    _keys(obj, path, {"object", "target", "angle"}, {"object"})
    kind = obj["object"]
    if kind not in GOAL_OBJECTS:
        raise _bad(f"{path}.object", kind, f"one of {tuple(GOAL_OBJECTS)}")
    if kind == "door":
        if "target" in obj:
            raise _bad(f"{path}.target", obj["target"], "no target for the door (give its opening angle)")
        if "angle" not in obj:
            raise _bad(f"{path}.angle", None, "an opening angle in radians for the door")
        return Goal(object="door", angle=_number(obj["angle"], f"{path}.angle", low=0.05, high=1.5))
    if "angle" in obj:
        raise _bad(f"{path}.angle", obj["angle"], "no angle for the box (give its target)")
    if "target" not in obj:
        raise _bad(f"{path}.target", None, "[x, y] or 'table' for the box")
    target = obj["target"]
    if target == "table":
        return Goal(object="box", on_table=True)
    if not (isinstance(target, (list, tuple)) and len(target) == 2):
        raise _bad(f"{path}.target", target, "[x, y] (metres, inside the room) or 'table'")
    x = _number(target[0], f"{path}.target[0]", low=-2.2, high=2.2)
    y = _number(target[1], f"{path}.target[1]", low=-2.2, high=2.2)
    return Goal(object="box", position=(x, y))


def validate(obj: Any) -> Plan:
    """A JSON object (dict, or a JSON string) -> Plan; BadInputError names the first bad field."""
    if isinstance(obj, (str, bytes)):
        try:
            obj = json.loads(obj)
        except json.JSONDecodeError as e:
            raise BadInputError(f"plan: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    _keys(obj, "plan", {"command", "subtasks"}, {"subtasks"})
    command = obj.get("command", "")
    if not isinstance(command, str):
        raise _bad("plan.command", command, "a string")
    subs = obj["subtasks"]
    if not isinstance(subs, list) or not 1 <= len(subs) <= MAX_SUBTASKS:
        raise _bad("subtasks", subs if not isinstance(subs, list) else f"{len(subs)} sub-tasks",
                   f"a list of 1..{MAX_SUBTASKS} sub-tasks")
    out = []
    for i, s in enumerate(subs):
        path = f"subtasks[{i}]"
        _keys(s, path, {"name", "edges", "goal", "hold_steps"}, {"edges"})
        edges = s["edges"]
        if not isinstance(edges, list) or len(edges) > MAX_EDGES:
            raise _bad(f"{path}.edges", edges, f"a list of 0..{MAX_EDGES} edges")
        goal = _goal(s.get("goal"), f"{path}.goal")
        if not edges and goal is None:
            raise _bad(f"{path}.edges", edges, "at least one edge or a goal (an empty sub-task completes nothing)")
        hold = s.get("hold_steps", DEFAULT_HOLD)
        if isinstance(hold, bool) or not isinstance(hold, int) or not 1 <= hold <= 100:
            raise _bad(f"{path}.hold_steps", hold, "an integer in [1, 100]")
        name = s.get("name", f"step{i}")
        if not isinstance(name, str):
            raise _bad(f"{path}.name", name, "a string")
        out.append(SubTask(name=name, edges=tuple(_edge(e, f"{path}.edges[{j}]") for j, e in enumerate(edges)),
                           goal=goal, hold_steps=hold))
    return Plan(command=command, subtasks=tuple(out))


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """The inverse of `validate` (validate(plan_to_json(p)) == p)."""
    subs = []
    for s in plan.subtasks:
        d: dict[str, Any] = {"name": s.name, "edges": [], "hold_steps": s.hold_steps}
        for e in s.edges:
            ed: dict[str, Any] = {"human": e.human, "object": e.object, "relation": e.relation}
            if e.distance:
                ed["distance"] = e.distance
            if e.grasp:
                ed["grasp"] = True
            d["edges"].append(ed)
        if s.goal is not None:
            g = s.goal
            if g.object == "door":
                d["goal"] = {"object": "door", "angle": g.angle}
            else:
                d["goal"] = {"object": "box", "target": "table" if g.on_table else list(g.position)}
        subs.append(d)
    return {"command": plan.command, "subtasks": subs}
