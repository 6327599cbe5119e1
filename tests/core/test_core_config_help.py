"""`iclr26 run NAME --help`, `iclr26 list NAME` and `iclr26 info NAME`: the config table is read from the dataclasses
(comments, docstrings, `check` calls), so it names every settable field and never drifts from the code."""

import dataclasses
from typing import Literal

import pytest

from core import cli, registry
from core.config import apply_overrides, check, describe, to_dict

LIMIT = 3


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Inner:
    """A nested group. `depth`: layers of the tower."""

    depth: int = 2
    width: int = 8  # hidden units per layer


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Outer:
    """The experiment.

    kappa: the load P / d at which the transition is predicted
    """

    inner: _Inner = _Inner()
    # which loss the model trains on
    loss: Literal["mse", "huber"] = "mse"
    # training
    kappa: float = 0.5
    lr: float = 1e-3
    steps: int = 10
    shuffle: bool = True
    low: int = 1
    high: int = 4  # upper bound of the range

    def __post_init__(self):
        check(self.kappa > 0, "kappa", self.kappa, "a positive load")
        for name in ("low", "high"):
            check(getattr(self, name) >= 0, name, getattr(self, name), ">= 0")
        check(self.high > self.low, "high", self.high, f"> low={self.low} and at most {LIMIT * 10}")


def _rows(config):
    return {r.path: r for r in describe(config)}


def test_describe_reads_comments_docstrings_checks_and_types():
    rows = _rows(_Outer(low=2))
    assert list(rows) == ["inner.depth", "inner.width", "loss", "kappa", "lr", "steps", "shuffle", "low", "high"]
    assert rows["inner.width"].meaning == "hidden units per layer"  # the comment ending the line
    assert rows["inner.depth"].meaning == "layers of the tower"  # "`depth`: ..." in the class docstring
    assert rows["loss"].meaning == "which loss the model trains on"  # the comment line above the field
    assert rows["kappa"].meaning == "the load P / d at which the transition is predicted"  # docstring "name: text"
    assert rows["lr"].meaning == "peak learning rate"  # the shared description of a conventional name
    assert rows["loss"].type == "str" and rows["loss"].allowed == "one of 'mse', 'huber'"
    assert rows["loss"].value == "'mse'"
    assert rows["shuffle"].allowed == "true / false"
    assert rows["kappa"].allowed == "a positive load"
    assert rows["low"].allowed == ">= 0"  # from the loop over field names
    # both checks on `high`, the f-string evaluated in this config and the module's scope
    assert rows["high"].allowed == ">= 0; > low=2 and at most 30"
    assert rows["steps"].allowed.startswith("a whole number of steps in [0, ")  # the common range check
    assert rows["inner.width"].meaning and rows["low"].meaning == ""
    assert rows["kappa"].meaning != "training"  # a one-word group header above a field is not its meaning


def _leaves(tree, prefix=""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _scalar_text(value):
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float, str)):
        return str(value)
    return None


@pytest.mark.parametrize("name", sorted(registry.experiments()))
def test_every_experiments_table_names_every_settable_field(name):
    exp = registry.get(name)
    for preset in exp.presets:
        config = exp.config(preset)
        rows = describe(config)
        leaves = dict(_leaves(to_dict(config)))
        assert [r.path for r in rows] == list(leaves), f"{name}/{preset}: the table and the config's fields differ"
        # every scalar field the table names is settable under that name, and setting its value changes nothing
        overrides = [f"{path}={text}" for path, value in leaves.items()
                     if (text := _scalar_text(value)) is not None and "\n" not in text and text != ""]
        assert apply_overrides(config, overrides) == config, f"{name}/{preset}"


def test_run_help_and_list_print_the_config_table(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "regression", "--help", "--preset", "tiny"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "usage: iclr26 run" in out and "config of preset 'tiny'" in out
    header = next(line for line in out.splitlines() if line.startswith("field "))
    assert header.split() == ["field", "type", "value", "allowed", "meaning"]
    assert any(line.split()[:3] == ["lr", "float", str(registry.get("regression").config("tiny").lr)]
               for line in out.splitlines() if line.strip())
    assert cli.main(["list", "regression"]) == 0
    assert "config of preset 'demo'" in capsys.readouterr().out
    assert cli.main(["run", "regression", "--preset", "huge", "--help"]) == 2
    assert "has no preset 'huge'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run"])
    assert exit_.value.code == 2 and "required: name" in capsys.readouterr().err


def test_info_shows_status_presets_readme_and_the_committed_claims(capsys):
    assert cli.main(["info", "cad"]) == 0
    out = capsys.readouterr().out
    assert "status: partial" in out and "generative/cad/README.md" in out
    assert "benchmarks/results/cad.json" in out and "claims held" in out and "check components_work: passed" in out
    assert cli.main(["info", "regression"]) == 0
    assert "core/README.md" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(registry.experiments()))
def test_every_experiment_says_what_every_field_means(name):
    missing = [r.path for r in describe(registry.get(name).config()) if not r.meaning]
    assert not missing, f"{name}: fields without a one-line meaning (a comment on the field): {missing}"
