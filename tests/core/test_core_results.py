import importlib.util
import json
import pathlib

import numpy as np
import pytest

from core import plots
from core.results import check, claim, load_results, write_results

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _render_module():
    spec = importlib.util.spec_from_file_location("render", ROOT / "benchmarks" / "render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_write_results_has_the_shared_format(tmp_path):
    path = write_results("demo_bench", rows=[{"seed": 0, "mse": np.float32(0.25)}],
                         claims=[claim("c1", "mse below 1", True, "0.25 < 1", n=3, interval=[0.2, 0.3])],
                         wall_seconds=1.234,
                         command="python benchmarks/demo_bench.py", directory=tmp_path, scale="tiny")
    record = json.loads(path.read_text())
    assert set(record) == {"command", "git_commit", "wall_seconds", "rows", "claims", "scale"}
    assert record["rows"] == [{"seed": 0, "mse": 0.25}] and record["wall_seconds"] == 1.23
    assert load_results("demo_bench", tmp_path) == record
    with pytest.raises(ValueError, match="missing keys \\['evidence'\\]"):
        write_results("bad", rows=[], claims=[{"id": "x", "statement": "s", "held": True}], wall_seconds=0,
                      directory=tmp_path)
    with pytest.raises(ValueError, match="'bare': n=None.*interval=None"):  # a verdict needs its statistics
        write_results("bad", rows=[], claims=[claim("bare", "s", True, "e")], wall_seconds=0, directory=tmp_path)
    write_results("checks", rows=[], claims=[check("c", "plumbing", True, "by construction")], wall_seconds=0,
                  directory=tmp_path)
    with pytest.raises(FileNotFoundError, match="run the benchmark"):
        load_results("absent", tmp_path)


def test_render_fills_markers_from_the_json():
    render = _render_module()
    record = {"command": "python b.py", "git_commit": "abc", "wall_seconds": 3.0,
              "rows": [{"model": "m", "mse": 0.123456}],
              "claims": [claim("beats", "m beats n", False, "0.12 vs 0.11")]}
    text = "a\n<!-- results:b -->\nold\n<!-- /results:b -->\n<!-- claims -->\n<!-- /claims -->\n"
    out = render.render_text(text, {"b": record})
    assert "| model | mse |\n|---|---|\n| m | 0.1235 |" in out
    assert "| beats | m beats n | **not held** |  |  | 0.12 vs 0.11 |" in out
    assert "**b** (0/1 held" in out and "old" not in out
    # a record with summary rows shows them in place of its per-run rows
    summarised = {**record, "rows": [{"seed": 0, "mse": 0.5}, {"seed": 1, "mse": 0.7}],
                  "summary": [{"model": "m", "mse_mean": 0.6}]}
    out = render.render_text(text, {"b": summarised})
    assert "| model | mse_mean |\n|---|---|\n| m | 0.6 |" in out and "| seed |" not in out
    assert "Per-run rows are in the JSON file." in out


def test_render_shows_verdicts_statistics_and_baselines():
    from core.results import check, paired_claim

    render = _render_module()
    claims = [paired_claim("gain", "a beats b", [0.8, 0.82, 0.81], [0.7, 0.69, 0.72], chance=0.5, oracle=0.95),
              paired_claim("tie", "a beats c", [0.8, 0.7, 0.9], [0.79, 0.8, 0.78]),
              check("plumbing", "the loss is finite", True, "by construction")]
    record = {"command": "python b.py", "git_commit": "abc", "wall_seconds": 1.0, "rows": [], "claims": claims}
    out = render.render_text("<!-- claims -->\n<!-- /claims -->\n", {"b": record})
    assert "**b** (1/2 held, 1 inconclusive; 1 sanity check;" in out
    assert "| chance / oracle |" in out and "| 0.5 / 0.95 |" in out
    assert "| tie | a beats c | **inconclusive** | 3 |" in out
    assert "| plumbing | the loss is finite | check: passed |" in out
    gain = next(line for line in out.splitlines() if line.startswith("| gain"))
    assert "| **held** | 3 | 0.1067 [" in gain


def test_render_check_fails_on_a_claim_without_statistics(tmp_path, monkeypatch, capsys):
    render = _render_module()
    monkeypatch.setattr(render, "RESULTS", tmp_path)
    monkeypatch.setattr(render, "readmes", lambda: [])
    (tmp_path / "x.json").write_text(json.dumps({"claims": [claim("bare", "s", True, "e")]}))
    assert render.main(["--check"]) == 1
    assert "x.json claim 'bare': n=None" in capsys.readouterr().err
    (tmp_path / "x.json").write_text(json.dumps({"claims": [claim("ok", "s", True, "e", n=3, interval=[1, 2])]}))
    assert render.main(["--check"]) == 0


def test_committed_readmes_are_rendered_from_the_committed_results():
    render = _render_module()
    records = render.load_all()
    stale = [str(p) for p in render.readmes() if render.render_text(p.read_text(), records) != p.read_text()]
    assert not stale, f"run `python benchmarks/render.py`: out of date with benchmarks/results: {stale}"


def test_plots_write_pngs(tmp_path):
    x = np.arange(5)
    for path in (plots.line_plot(tmp_path / "a.png", {"y": (x, x**2, x, x**2 + 1), "z": (x, x)}, logy=True),
                 plots.bar_plot(tmp_path / "b.png", {"a": 1.0, "b": 2.0}, {"a": 0.1}),
                 plots.image_grid(tmp_path / "c.png", np.zeros((3, 8, 8)), ncols=2, titles=["1", "2", "3"])):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_speedup_claim_holds_only_when_every_pair_reaches_the_goal():
    from core.results import speedup_claim

    held = speedup_claim("x", "s", [2.1, 2.5, 3.0], 2.0, excluded="compile excluded")
    assert held["held"] and held["n"] == 3 and held["interval"] == [2.1, 3.0]
    assert "2.50x median over 3 interleaved pairs" in held["evidence"] and held["evidence"].endswith("compile excluded")
    assert not speedup_claim("x", "s", [1.9, 2.5, 3.0], 2.0)["held"]  # one pair below the goal


def test_method_table_status_summary_and_own_data_are_rendered_from_the_status_file(tmp_path, monkeypatch):
    from core.results import paired_claim

    render = _render_module()
    (tmp_path / "methods.toml").write_text(
        '[[method]]\nnumber = 1\npaper = "A"\nhome = "a/"\nstatus = "partial"\nmissing = "the b part"\n'
        'scaled = "small"\nresults = ["a_bench"]\ndata = "`--set path=DIR`"\n'
        '[[method]]\nnumber = 2\npaper = "B"\nhome = "b/"\nstatus = "not started"\nmissing = ""\nscaled = ""\n'
        'results = []\ndata = ""\n')
    monkeypatch.setattr(render, "METHODS", tmp_path / "methods.toml")
    record = {"claims": [paired_claim("g", "s", [2.0, 2.1, 2.2], [1.0, 1.1, 1.05]),
                         paired_claim("t", "s", [1.0, 2.0, 0.5], [1.2, 1.1, 0.9])]}
    text = ("<!-- status -->\n<!-- /status -->\n<!-- methods -->\nold\n<!-- /methods -->\n"
            "<!-- own-data -->\n<!-- /own-data -->")
    out = render.render_text(text, {"a_bench": record})
    assert "**0** are complete, **1** partial" in out and "**1** not started" in out
    assert "| 1 | A | `a/` | partial | 1/2 held, 1 inconclusive | small; missing: the b part |" in out
    assert "| 2 | B | `b/` | not started | – |  |" in out and "old" not in out
    assert "- A (`a/`): `--set path=DIR`" in out and "- B" not in out
    (tmp_path / "methods.toml").write_text(
        '[[method]]\nnumber = 1\npaper = "A"\nhome = "a/"\nstatus = "partial"\nmissing = ""\nscaled = ""\n'
        'results = []\ndata = ""\n')
    with pytest.raises(ValueError, match="a partial method says what is missing"):
        render.render_text(text, {})


def test_equal_differences_up_to_rounding_are_decided_by_the_sign_test():
    from core.results import paired_claim
    # three seeds, each one item in 150 lower: the float differences differ only in the last bits
    ours, base = [23 / 150, 35 / 150, 22 / 150], [24 / 150, 36 / 150, 23 / 150]
    c = paired_claim("x", "lower", ours, base, higher_is_better=False)
    assert c["held"] is None and "every value equal" in c["evidence"]  # p = 0.25 at n = 3
    c6 = paired_claim("x", "lower", ours * 2, base * 2, higher_is_better=False)
    assert c6["held"] is True  # six seeds all the same sign: p = 0.031
