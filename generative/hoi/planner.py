"""Planners: a command -> an RMD plan (plan.py).

- `TemplatePlanner`: the offline stand-in for the paper's VLM. A small command grammar, sequences joined by
  "then" / "," / ";":  `push box to (x, y)`, `carry box to table`, `open door`, e.g.
  `open door then push box to (1.0, -1.0)`. It sees no image; the scene layout is fixed (scene2d.py). A push
  ends with the box at rest on its target (`settle box`); in a sequence, a part that ends gripping an object
  lets go of it, keeping its goal, before the next part (`release handle` after `open door`).
- `LLMPlanner`: any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, llama.cpp server, ...). It sends
  the schema and two worked examples, asks for one JSON object and validates the answer; the transport is
  injectable, so tests use a local fake server and nothing here needs a network by default.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable
from typing import Any

from core.config import BadInputError
from generative.hoi import plan as plan_lib

_NUM = r"(-?\d+(?:\.\d+)?)"
_PATTERNS = (
    ("push", re.compile(rf"^push (?:the )?box to \(?\s*{_NUM}\s*,\s*{_NUM}\s*\)?$")),
    ("carry", re.compile(r"^(?:carry|put|place) (?:the )?box (?:to|on|onto) (?:the )?table$")),
    ("open", re.compile(r"^open (?:the )?door$")),
    ("reach", re.compile(r"^(?:reach|touch) (?:the )?(box|handle)$")),
)
GRAMMAR = "push box to (x, y) | carry box to table | open door | reach box | reach handle, joined by 'then', ',' or ';'"


def _reach(obj: str) -> dict[str, Any]:
    return {"name": f"reach {obj}", "edges": [{"human": "hand", "object": obj, "relation": "approach",
                                              "distance": 0.0}]}


def _template(kind: str, args: tuple[str, ...]) -> list[dict[str, Any]]:
    if kind == "push":
        x, y = float(args[0]), float(args[1])
        return [_reach("box"),
                {"name": "push box", "edges": [{"human": "hand", "object": "box", "relation": "contact"},
                                               {"human": "hand", "object": "box", "relation": "move_with"}],
                 "goal": {"object": "box", "target": [x, y]}},
                # a push ends with the box at rest on its target, as a carry ends with the box let go on the table
                {"name": "settle box", "edges": [{"human": "hand", "object": "box", "relation": "hold_still"}],
                 "goal": {"object": "box", "target": [x, y]}}]
    if kind == "carry":
        return [_reach("box"),
                {"name": "carry box", "edges": [
                    {"human": "hand", "object": "box", "relation": "contact", "grasp": True},
                    {"human": "hand", "object": "box", "relation": "move_with", "grasp": True}],
                 "goal": {"object": "box", "target": "table"}},
                {"name": "place box", "edges": [{"human": "hand", "object": "box", "relation": "release",
                                                 "distance": 0.05}],
                 "goal": {"object": "box", "target": "table"}}]
    if kind == "reach":
        return [_reach(args[0])]
    # open
    return [_reach("handle"),
            {"name": "open door", "edges": [
                {"human": "hand", "object": "handle", "relation": "contact", "grasp": True},
                {"human": "hand", "object": "handle", "relation": "move_with", "grasp": True}],
             "goal": {"object": "door", "angle": 1.0}}]


def _let_go(last: dict[str, Any]) -> list[dict[str, Any]]:
    """Between two parts of a sequence: a part that ends gripping an object (open door ends holding the
    handle) lets go of it, keeping that part's goal, before the next part starts."""
    held = [e["object"] for e in last["edges"] if e.get("grasp")]
    if not held:
        return []
    step = {"name": f"release {held[0]}", "edges": [{"human": "hand", "object": held[0], "relation": "release",
                                                      "distance": 0.05}]}
    return [{**step, "goal": last["goal"]} if last.get("goal") else step]


class TemplatePlanner:
    """The offline planner over the command grammar `GRAMMAR` (the README's stand-in for the VLM)."""

    def __call__(self, command: str) -> plan_lib.Plan:
        text = " ".join(command.lower().strip().rstrip(".").split())
        text = re.sub(r"\(([^)]*)\)", lambda m: "(" + m.group(1).replace(",", "|") + ")", text)  # keep (x, y)
        separators = r"\s*(?:,\s*and then|,\s*then|\band then\b|;|,|\bthen\b)\s*"
        parts = [p.strip().replace("|", ",") for p in re.split(separators, text) if p.strip()]
        if not parts:
            raise BadInputError(f"command={command!r}: expected {GRAMMAR}")
        subtasks: list[dict[str, Any]] = []
        for part in parts:
            for kind, pattern in _PATTERNS:
                m = pattern.match(part)
                if m:
                    if subtasks:
                        subtasks += _let_go(subtasks[-1])
                    subtasks += _template(kind, m.groups())
                    break
            else:
                raise BadInputError(f"command part {part!r} of {command!r}: expected {GRAMMAR}")
        if len(subtasks) > plan_lib.MAX_SUBTASKS:
            raise BadInputError(f"command={command!r}: {len(subtasks)} sub-tasks, expected at most "
                                f"{plan_lib.MAX_SUBTASKS} (shorten the sequence)")
        return plan_lib.validate({"command": command, "subtasks": subtasks})


SYSTEM_PROMPT = """You turn a household command into a Relative Movement Dynamics (RMD) plan for a simulated
person with a torso and one arm ending in a gripper hand. Reply with ONE JSON object and nothing else:
{"command": str, "subtasks": [{"name": str, "edges": [{"human": "hand"|"torso", "object": "box"|"handle",
"relation": "approach"|"contact"|"move_with"|"release"|"keep_distance"|"hold_still", "distance": float (m),
"grasp": bool}], "goal": {"object": "box", "target": [x, y] | "table"} | {"object": "door", "angle": rad} | null,
"hold_steps": int}]}. """ + (
    f"Sub-tasks are time-ordered (at most {plan_lib.MAX_SUBTASKS} sub-tasks, at most {plan_lib.MAX_EDGES} edges "
    "each); a sub-task is done when all its edges and its goal hold for hold_steps steps. The room spans "
    "[-2.2, 2.2] m in x and y.")

Transport = Callable[[str, dict[str, Any], dict[str, str]], dict[str, Any]]


def urllib_transport(url: str, payload: dict[str, Any], headers: dict[str, str], *, timeout: float = 60.0
                     ) -> dict[str, Any]:
    """POST JSON, return the decoded JSON answer (the default transport of LLMPlanner)."""
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (a user-given endpoint)
        return json.loads(response.read().decode())


def extract_json(text: str) -> Any:
    """The first JSON object in a model's reply (code fences and prose around it are dropped)."""
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    candidate = fenced.group(1) if fenced else text[text.find("{"): text.rfind("}") + 1]
    try:
        return json.loads(candidate)
    except json.JSONDecodeError as e:
        raise BadInputError(f"LLM reply {text[:120]!r}: expected one JSON plan object ({e.msg})") from None


class LLMPlanner:
    """An OpenAI-compatible chat-completions planner: `LLMPlanner(base_url, model, api_key)(command) -> Plan`.

    base_url: e.g. "http://localhost:8000/v1" (the client POSTs to base_url + "/chat/completions").
    transport(url, payload, headers) -> JSON answer; defaults to urllib. The few-shot examples are the
    template planner's plans, so the model sees the schema in use.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *, transport: Transport | None = None,
                 temperature: float = 0.0, examples: tuple[str, ...] = ("push box to (1, -1)", "open door")):
        if not base_url.startswith(("http://", "https://")):
            raise BadInputError(f"base_url={base_url!r}: expected an http(s) URL such as http://localhost:8000/v1")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key, self.temperature = model, api_key, temperature
        self.transport = transport or urllib_transport
        template = TemplatePlanner()
        self.examples = [(c, json.dumps(template(c).to_json())) for c in examples]

    def messages(self, command: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": SYSTEM_PROMPT}]
        for c, p in self.examples:
            msgs += [{"role": "user", "content": c}, {"role": "assistant", "content": p}]
        return msgs + [{"role": "user", "content": command}]

    def __call__(self, command: str) -> plan_lib.Plan:
        payload = {"model": self.model, "messages": self.messages(command), "temperature": self.temperature}
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        answer = self.transport(self.url, payload, headers)
        try:
            content = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise BadInputError(f"LLM answer {str(answer)[:120]!r}: expected choices[0].message.content") from None
        obj = extract_json(content)
        if isinstance(obj, dict) and "command" not in obj:
            obj["command"] = command
        return plan_lib.validate(obj)
