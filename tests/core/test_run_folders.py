"""Every experiment's `tiny` run folder holds what the README promises (issue 50): config.json, metrics.json,
metrics.jsonl with at least one record (in the folder, or one per training stage in the stage's subfolder), and
PNG plots; a checkpoints/ folder, where a trainer writes one, is not empty. Slow-marked (it runs every
experiment's tiny preset, ~10-20 min on 2 cores): `pytest -m slow tests/core/test_run_folders.py` runs it."""

import json
import pathlib
import re

import pytest

from core import cli, registry

ROOT = pathlib.Path(__file__).resolve().parents[2]


def promised_files() -> list[str]:
    """The run-folder files the README's quick start names (the sentence "A run folder holds ...")."""
    text = (ROOT / "README.md").read_text()
    sentence = re.search(r"A run folder holds (.+?)\. ", " ".join(text.split()))
    assert sentence, "README.md no longer says what a run folder holds"
    names = [name for name in re.findall(r"`([^`]+)`", sentence.group(1)) if re.search(r"\.\w+$|/$", name)]
    return list(dict.fromkeys(names))


def test_the_readme_names_the_run_folder_files():
    assert promised_files() == ["config.json", "metrics.json", "metrics.jsonl", "checkpoints/"]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(registry.experiments()))
def test_tiny_run_folder_holds_what_the_readme_promises(name, tmp_path):
    exp = registry.get(name)
    if "tiny" not in exp.presets:
        pytest.skip(f"{name} has no tiny preset")
    workdir = tmp_path / "run"
    cli.run_experiment(name, "tiny", [], workdir)
    record = json.loads((workdir / "config.json").read_text())
    assert record["experiment"] == name and record["preset"] == "tiny"
    assert isinstance(json.loads((workdir / "metrics.json").read_text()), dict)
    logs = sorted(workdir.rglob("metrics.jsonl"))
    assert logs, f"{name}: no metrics.jsonl in the run folder or a stage's subfolder"
    for log in logs:
        lines = [line for line in log.read_text().splitlines() if line.strip()]
        assert lines, f"{name}: {log.relative_to(workdir)} has no record"
        assert all(isinstance(json.loads(line), dict) for line in lines)
    assert list(workdir.rglob("*.png")), f"{name}: no PNG plot"
    for folder in workdir.rglob("checkpoints"):
        assert any(folder.iterdir()), f"{name}: an empty {folder.relative_to(workdir)}/"
