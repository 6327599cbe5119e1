"""Frozen dataclass configs, typed `--set key=value` overrides, validation, and the bad-input error type.

Every method's config is a frozen, keyword-only dataclass (possibly nested). Overrides name a field by its
dotted path (`train.lr=3e-4`), the value is parsed with the field's annotated type, every override is set
first and the config's own `__post_init__` checks (through `check`) run once on the result, so a check that
ties two fields together sees both, and an invalid value is reported once, at the boundary, naming the
field, the value and what is allowed. Fields whose name says what they are (seeds, step and epoch counts)
get range checks here, for every config alike.

`BadInputError` is the one error type for input the user can fix (a config value, a data file, an array's
shape); `ConfigError` is its config-field case. The CLI prints either as one line with exit status 2.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import io
import json
import re
import sys
import textwrap
import tokenize
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

C = TypeVar("C")


class BadInputError(ValueError):
    """Input the user can fix: the message names the value, what was expected, and the file where there is one."""


class ConfigError(BadInputError):
    """A config field or override is invalid; the message names the field, the value and what is allowed."""


def check(ok: bool, field: str, value: Any, expected: str) -> None:
    """Raise ConfigError(`field=value: expected ...`) unless `ok`. Call it in a config's `__post_init__`."""
    if not ok:
        raise ConfigError(f"{field}={value!r}: expected {expected}")


def bad_input(what: str, value: Any, expected: str, *, file: Any = None) -> BadInputError:
    """`BadInputError("file: what=value: expected ...")`, for loaders: `raise bad_input("column", c, "...", file=p)`."""
    where = f"{file}: " if file is not None else ""
    return BadInputError(f"{where}{what}={value!r}: expected {expected}")


def check_input(ok: bool, what: str, value: Any, expected: str, *, file: Any = None) -> None:
    """Raise `bad_input(...)` unless `ok`; the loaders' counterpart of `check`."""
    if not ok:
        raise bad_input(what, value, expected, file=file)


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _parse(text: str, tp: Any, path: str) -> Any:
    """Parse `text` as a value of annotated type `tp` (str, int, float, bool, Literal, Optional, tuples)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and text.strip().lower() in ("none", "null"):
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _parse(text, arg, path)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(f"{path}={text!r}: expected one of {_type_name(tp)}")
    if origin is typing.Literal:
        for choice in args:
            if str(choice) == text:
                return choice
        raise ConfigError(f"{path}={text!r}: expected one of {', '.join(map(repr, args))}")
    if origin in (tuple, list):
        body = text.strip()
        if body.startswith(("[", "(")):
            body = body[1:-1]
        items = [s.strip() for s in body.split(",") if s.strip()]
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(items) != len(args):
                raise ConfigError(f"{path}={text!r}: expected {len(args)} comma-separated values")
            return tuple(_parse(s, a, path) for s, a in zip(items, args))
        item_type = args[0] if args else str
        parsed = [_parse(s, item_type, path) for s in items]
        return tuple(parsed) if origin is tuple else parsed
    if tp is bool:
        low = text.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(f"{path}={text!r}: expected a boolean (true/false)")
    if tp is int:
        try:
            return int(text)
        except ValueError:
            try:
                as_float = float(text)
            except ValueError:
                as_float = None
            if as_float is not None and as_float.is_integer():
                return int(as_float)
            raise ConfigError(f"{path}={text!r}: expected an integer") from None
    if tp is float:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{path}={text!r}: expected a number") from None
        if value != value:  # NaN passes every `x > 0` check by failing none of the `x <= 0` ones
            raise ConfigError(f"{path}={text!r}: expected a number, not NaN")
        return value
    if tp is str:
        return text
    if _is_dataclass_type(tp):
        raise ConfigError(f"{path}={text!r}: {path} is a group of fields; set one of "
                          f"{', '.join(f.name for f in dataclasses.fields(tp))} (e.g. {path}.<field>=...)")
    raise ConfigError(f"{path}={text!r}: fields of type {_type_name(tp)} cannot be set from the command line")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


class _Group(dict):
    """Parsed overrides of one nested config group (field name -> value or _Group)."""


def _parse_into(config: Any, keys: list[str], text: str, full: str, tree: _Group) -> None:
    """Parse one override into `tree` (nested by group) without building any config yet."""
    if not dataclasses.is_dataclass(config):
        raise ConfigError(f"{full}: {'.'.join(keys)} is not a config group")
    names = [f.name for f in dataclasses.fields(config)]
    key = keys[0]
    if key not in names:
        close = difflib.get_close_matches(key, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"unknown config field {full.split('=')[0]!r} in {type(config).__name__}"
                          f" (fields: {', '.join(names)}){hint}")
    if len(keys) == 1:
        tree[key] = _parse(text, _field_types(type(config))[key], full.split("=")[0])
    else:
        sub = tree.get(key)
        if not isinstance(sub, _Group):
            sub = tree[key] = _Group()
        _parse_into(getattr(config, key), keys[1:], text, full, sub)


def _build(config: Any, tree: _Group, items: Sequence[str]) -> Any:
    """Replace every overridden field of `config` at once (inner groups first): each group's checks run once."""
    values = {k: _build(getattr(config, k), v, items) if isinstance(v, _Group) else v for k, v in tree.items()}
    try:
        return dataclasses.replace(config, **values)
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:
        raise ConfigError(f"--set {' --set '.join(items)}: {err}") from None


def apply_overrides(config: C, overrides: Sequence[str]) -> C:
    """Return `config` with every `a.b.c=value` override set (parsed by the field's type, the last of repeated
    keys winning), then validated once: each group's own checks and `check_common_fields`."""
    tree = _Group()
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected KEY=VALUE, e.g. train.lr=3e-4")
        key, text = item.split("=", 1)
        _parse_into(config, key.strip().split("."), text.strip(), item, tree)
    if tree:
        config = _build(config, tree, list(overrides))
    check_common_fields(config)
    return config


# Fields named like this mean the same thing in every config, so their ranges are checked here once.
MAX_SEED = 2**32 - 1  # numpy's and most seeding APIs' range
MAX_STEPS = 10**9  # a bound no run here needs: a typo (`steps=1e30`) must not start a run that never ends
MAX_COUNT = 10**6  # seeds / runs per variant
_SEED = re.compile(r"^(.*_)?seed$")
_STEPS = re.compile(r"^(.*_)?(steps|epochs|iters|iterations|rounds|timesteps)$")
_COUNT = re.compile(r"^(n_)?seeds$|^(num|n)_(seeds|runs)$")


def check_common_fields(config: Any, prefix: str = "", *, device_count: int | None = None) -> None:
    """Range checks on the integer fields whose name says what they hold: `*seed` in [0, 2**32), step / epoch /
    iteration counts in [0, 1e9], seed counts in [1, 1e6], and with `device_count` the mesh sizes (`mesh_*`,
    `*_parallel`) dividing the device count. Nested groups are checked with their dotted path."""
    if not dataclasses.is_dataclass(config):
        return
    for f in dataclasses.fields(config):
        value, path = getattr(config, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            check_common_fields(value, f"{path}.", device_count=device_count)
            continue
        if not isinstance(value, int) or isinstance(value, bool):  # int fields only (the parser makes them ints)
            continue
        rule = _common_rule(f.name)
        if rule is not None:
            low, high, expected = rule
            check(low <= value <= high, path, value, expected)
        elif device_count is not None and _is_mesh_size(f.name) and value != -1:
            check(value >= 1 and device_count % value == 0, path, value,
                  f"a mesh size dividing the {device_count} visible device(s)")


def _is_mesh_size(field: str) -> bool:
    name = field.lower()
    return name.startswith("mesh_") or name.endswith("_parallel")


def _common_rule(field: str) -> tuple[int, int, str] | None:
    """(low, high, expected) for an integer field whose name says what it holds, else None."""
    name = field.lower()
    if _SEED.match(name):
        return 0, MAX_SEED, f"an integer seed in [0, {MAX_SEED}]"
    if _COUNT.match(name):
        return 1, MAX_COUNT, f"an integer in [1, {MAX_COUNT}]"
    if _STEPS.match(name):
        return 0, MAX_STEPS, f"a whole number of steps in [0, {MAX_STEPS:.0e}]"
    return None


def to_dict(config: Any) -> dict[str, Any]:
    """A JSON-able dict of a (nested) dataclass config; tuples become lists."""
    def convert(value: Any) -> Any:
        if dataclasses.is_dataclass(value):
            return {f.name: convert(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, (tuple, list)):
            return [convert(v) for v in value]
        if isinstance(value, Mapping):
            return {str(k): convert(v) for k, v in value.items()}
        return value
    return convert(config)


def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
    """Rebuild a (nested) dataclass config from `to_dict`'s output; unknown keys are an error."""
    hints = _field_types(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown fields {sorted(unknown)}; expected a subset of {sorted(names)}")
    kwargs = {}
    for name, value in data.items():
        tp = hints[name]
        if _is_dataclass_type(tp) and isinstance(value, Mapping):
            value = from_dict(tp, value)
        elif typing.get_origin(tp) is tuple and isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def fingerprint(config: Any) -> str:
    """A canonical JSON string of the config, used to refuse a checkpoint written under another config."""
    return json.dumps(to_dict(config), sort_keys=True, default=str)


# ---- the config as a table (`iclr26 run NAME --help`), read from the dataclasses so it never drifts ----

@dataclasses.dataclass(frozen=True)
class FieldDoc:
    """One settable field: its dotted path, type, value in this config, allowed values and one-line meaning."""

    path: str
    type: str
    value: str
    allowed: str
    meaning: str


@functools.cache
def _class_notes(cls: type) -> tuple[dict[str, str], dict[str, list[ast.expr]]]:
    """(meaning, checks) per field of dataclass `cls`, read from its source: the comment ending the field's line
    (or the comment line right above it), and the `expected` argument of every `check(ok, "field", value,
    expected)` in `__post_init__` that names the field, directly or through a loop over a tuple of names."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}, {}
    lines = source.splitlines()
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    # a comment line above a field describes it; a short one ("# model", "# training") heads a group of fields
    above = {n: text for n, text in comments.items()
             if lines[n - 1].lstrip().startswith("#") and len(text.split()) >= 3}
    classdef = ast.parse(source).body[0]
    names = {f.name for f in dataclasses.fields(cls)}
    meaning: dict[str, str] = {}
    for node in classdef.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in names:
            text = comments.get(node.end_lineno) or above.get(node.lineno - 1)
            if text:
                meaning[node.target.id] = text
    for name, text in _docstring_notes(inspect.getdoc(cls) or "", names).items():
        meaning.setdefault(name, text)
    checks: dict[str, list[ast.expr]] = {}

    def field_of(arg: ast.expr) -> str | None:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            last = arg.value.rsplit(".", 1)[-1]
            return last if last in names else None
        return None

    def visit(node: ast.AST, loop_names: dict[str, tuple[str, ...]]) -> None:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) \
                and isinstance(node.iter, (ast.Tuple, ast.List)) \
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.iter.elts):
            loop_names = {**loop_names, node.target.id: tuple(e.value for e in node.iter.elts)}
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "check" \
                and len(node.args) >= 4:
            arg = node.args[1]
            fields = loop_names.get(arg.id, ()) if isinstance(arg, ast.Name) else (field_of(arg),)
            for name in fields:
                if name in names:
                    checks.setdefault(name, []).append(node.args[3])
        for child in ast.iter_child_nodes(node):
            visit(child, loop_names)

    for node in classdef.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__post_init__":
            visit(node, {})
    return meaning, checks


def _docstring_notes(doc: str, names: set[str]) -> dict[str, str]:
    """Field notes in a class docstring: a line `name: text` (Google style, or a column layout), or an inline
    "`name`: text" / "`name` (text)" up to the end of its sentence."""
    notes: dict[str, str] = {}
    for match in re.finditer(r"^\s*(\w+)\s*(?:\([^)]*\))?:\s+(.+)$", doc, re.MULTILINE):
        if match.group(1) in names:
            notes.setdefault(match.group(1), " ".join(match.group(2).split()))
    for match in re.finditer(r"`(\w+)`\s*:\s*(.+?)(?:\.(?:\s|$)|;|$)", doc, re.MULTILINE):
        if match.group(1) in names:
            notes.setdefault(match.group(1), " ".join(match.group(2).split()))
    return notes


def _expected_text(expr: ast.expr, config: Any) -> str:
    if isinstance(expr, ast.Constant):
        return str(expr.value)
    try:  # an f-string naming module constants or other fields: its text in this config
        scope = dict(vars(sys.modules[type(config).__module__]))
        return str(eval(compile(ast.Expression(expr), "<check>", "eval"), scope, {"self": config}))  # noqa: S307
    except Exception:  # noqa: BLE001 (a help table must not fail on an unusual check)
        return ast.unparse(expr)


def _allowed(field: str, tp: Any, exprs: Sequence[ast.expr], config: Any) -> str:
    parts = []
    rule = _common_rule(field) if tp is int else None
    if rule is not None:
        parts.append(rule[2])
    if _is_mesh_size(field):
        parts.append("a mesh size dividing the device count (-1: the remaining devices)")
    if typing.get_origin(tp) is typing.Literal:
        parts.append("one of " + ", ".join(repr(v) for v in typing.get_args(tp)))
    elif tp is bool:
        parts.append("true / false")
    for text in (_expected_text(e, config) for e in exprs):
        if text not in parts:
            parts.append(text)
    return "; ".join(parts)


def _annotation(tp: Any) -> str:
    if typing.get_origin(tp) is typing.Literal:
        return type(typing.get_args(tp)[0]).__name__
    if typing.get_origin(tp) is not None:  # tuple[int, ...], int | None
        return str(tp).replace("typing.", "")
    return _type_name(tp)


# Fields most configs share, described once here; a field's own comment takes precedence.
_COMMON_MEANINGS = {
    "seed": "PRNG seed of the run (data, initialisation, sampling)",
    "seeds": "seeds run one after another (the benchmark's paired replicates)",
    "lr": "peak learning rate",
    "learning_rate": "peak learning rate",
    "warmup": "linear learning-rate warm-up steps",
    "warmup_steps": "linear learning-rate warm-up steps",
    "weight_decay": "decoupled (AdamW) weight decay",
    "batch_size": "examples per optimisation step",
    "steps": "optimisation steps",
    "epochs": "passes over the training data",
    "log_every": "steps between metrics.jsonl records",
    "eval_every": "steps between evaluations",
    "checkpoint_every": "steps between checkpoints",
    "grad_clip": "global gradient-norm clip (0: none)",
}


def _short(value: Any, width: int = 40) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def describe(config: Any, prefix: str = "") -> list[FieldDoc]:
    """Every settable field of a (nested) dataclass config, depth first, as `--set PATH=VALUE` names it."""
    hints = _field_types(type(config))
    meaning, checks = _class_notes(type(config))
    rows: list[FieldDoc] = []
    for f in dataclasses.fields(config):
        value, path = getattr(config, f.name), prefix + f.name
        if dataclasses.is_dataclass(value):
            rows.extend(describe(value, path + "."))
            continue
        tp = hints.get(f.name, Any)
        rows.append(FieldDoc(path, _annotation(tp), _short(value), _allowed(f.name, tp, checks.get(f.name, ()), config),
                             meaning.get(f.name) or _COMMON_MEANINGS.get(f.name, "")))
    return rows
