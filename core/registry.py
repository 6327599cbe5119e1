"""The experiment registry: methods announce their experiments through entry points, core never imports them.

A method's package exposes `EXPERIMENT = Experiment(...)` (or a list of them) and `setup.cfg` names it under
`[options.entry_points] iclr26.experiments`. Extra CLI subcommands (e.g. a lab-facing `iclr26 bo`) use the
`iclr26.commands` group: `register(subparsers)` adds an argparse subparser whose `func(args)` runs it.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import pathlib
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

EXPERIMENT_GROUP = "iclr26.experiments"
COMMAND_GROUP = "iclr26.commands"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Experiment:
    """One runnable experiment: its presets (config instances) and `run(config, workdir) -> metrics`."""

    name: str
    paper: int | None
    title: str
    presets: Mapping[str, Any]
    run: Callable[[Any, pathlib.Path], Mapping[str, Any]]
    demo_preset: str = "demo"
    runtimes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # False keeps a method whose demo is far longer than the others' out of `iclr26 demo` (which names it
    # and how to run it); `iclr26 demo --only NAME` and `iclr26 run NAME` still run it.
    in_demo: bool = True

    def __post_init__(self):
        if not self.presets:
            raise ValueError(f"experiment {self.name!r}: expected at least one preset")
        if self.demo_preset not in self.presets:
            raise ValueError(f"experiment {self.name!r}: demo_preset {self.demo_preset!r} is not one of "
                             f"its presets {sorted(self.presets)}")

    def config(self, preset: str | None = None) -> Any:
        preset = preset or self.demo_preset
        if preset not in self.presets:
            close = difflib.get_close_matches(preset, list(self.presets), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise KeyError(f"experiment {self.name!r} has no preset {preset!r} "
                           f"(presets: {', '.join(self.presets)}){hint}")
        return self.presets[preset]


class UnknownExperimentError(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


def _entry_points(group: str) -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=group), key=lambda ep: ep.name)


@functools.cache
def experiments() -> dict[str, Experiment]:
    """All registered experiments by name, in name order."""
    found: dict[str, Experiment] = {}
    for ep in _entry_points(EXPERIMENT_GROUP):
        loaded = ep.load()
        for exp in loaded if isinstance(loaded, (list, tuple)) else [loaded]:
            if not isinstance(exp, Experiment):
                raise TypeError(f"entry point {ep.name} = {ep.value} gave {type(exp).__name__}, expected Experiment")
            if exp.name in found:
                raise ValueError(f"experiment name {exp.name!r} is registered twice")
            found[exp.name] = exp
    return dict(sorted(found.items()))


def get(name: str) -> Experiment:
    """The experiment called `name`; an unknown name raises with the closest registered names.

    The entry point of the same name is tried first, so that running one experiment imports one method, not
    all of them (about 2 s of imports per process on 2 CPU cores); names it does not provide (e.g. `bit_e2e`,
    registered by `bit`) are found by loading every entry point."""
    key = name.replace("-", "_")
    for ep in _entry_points(EXPERIMENT_GROUP):
        if ep.name.replace("-", "_") == key:
            loaded = ep.load()
            for exp in loaded if isinstance(loaded, (list, tuple)) else [loaded]:
                if isinstance(exp, Experiment) and exp.name.replace("-", "_") == key:
                    return exp
    table = experiments()
    if name not in table:  # `a2a-security` and `a2a_security` name the same experiment
        spelled = {n.replace("-", "_"): n for n in table}
        name = spelled.get(name.replace("-", "_"), name)
    if name not in table:
        close = difflib.get_close_matches(name, list(table), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownExperimentError(f"unknown experiment {name!r}{hint} (registered: {', '.join(table)}; "
                                     "see `iclr26 list`)")
    return table[name]


def command_registrars() -> list[tuple[str, Callable[[Any], None]]]:
    """(name, register(subparsers)) for each extra CLI subcommand."""
    return [(ep.name, ep.load()) for ep in _entry_points(COMMAND_GROUP)]
