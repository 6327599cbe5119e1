"""Ask/tell campaigns: kill-and-resume gives identical suggestions, bad input gets clear errors, pool mode,
the `iclr26 bo` CLI."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from core.cli import main as iclr26  # the real CLI: `bo` arrives through the iclr26.commands entry point
from optimization.lgbo.campaign import Campaign, CampaignFileError
from optimization.lgbo.prompts import PreferenceParseError
from optimization.lgbo.space import Categorical, Continuous, Space

SPACE = Space((Continuous(name="temp", low=20.0, high=100.0), Continuous(name="conc", low=0.0, high=2.0),
               Categorical(name="solvent", options=("water", "ethanol"))))
SMALL = dict(n_init=3, n_grid=32, n_candidates=64, refine_starts=0, fit_steps=10)


def objective(p):
    return -((p["temp"] - 70.0) / 40.0) ** 2 - (p["conc"] - 1.2) ** 2 + (0.3 if p["solvent"] == "ethanol" else 0.0)


CHILD = textwrap.dedent("""
    import json, os, signal, sys
    from optimization.lgbo.campaign import Campaign
    from optimization.lgbo.space import Space
    path, space, small = sys.argv[1], Space.from_json(json.loads(sys.argv[2])), json.loads(sys.argv[3])
    c = Campaign.create(path, space, **small)
    xs = c.ask(3)
    ys = [-((p["temp"] - 70.0) / 40.0) ** 2 - (p["conc"] - 1.2) ** 2 + (0.3 if p["solvent"] == "ethanol" else 0.0)
          for p in xs]
    c.tell(xs, ys)
    print(json.dumps(c.ask(2)), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)   # the lab machine dies right after suggesting
""")


@pytest.mark.multiprocess
def test_ask_kill_resume_gives_identical_suggestions(tmp_path):
    path = tmp_path / "campaign.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps(SPACE.to_json()), json.dumps(SMALL)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    before = json.loads(proc.stdout.strip().splitlines()[-1])
    resumed = Campaign.load(path)
    assert resumed.ask(2) == before  # the pending suggestions, read back
    recomputed = resumed.ask(2, reuse_pending=False)  # and recomputing from the file's state gives the same
    assert recomputed == before
    assert all(SPACE.check_values(p) for p in before) and before[0] != before[1]
    st = resumed.status()
    assert st["observations"] == 3 and st["pending"] == before


def test_bad_input_gets_clear_errors(tmp_path):
    c = Campaign.create(tmp_path / "c.json", SPACE, **SMALL)
    good = {"temp": 50.0, "conc": 1.0, "solvent": "water"}
    with pytest.raises(ValueError, match="outside the bounds"):
        c.tell({**good, "temp": 120.0}, 1.0)
    with pytest.raises(ValueError, match="has 2 entries, expected 3"):
        c.tell([[50.0, 1.0]], [1.0])
    with pytest.raises(ValueError, match="not finite"):
        c.tell(good, float("nan"))
    with pytest.raises(ValueError, match="not one of the options"):
        c.tell({**good, "solvent": "dmso"}, 1.0)
    with pytest.raises(ValueError, match="2 points and 1 values"):
        c.tell([good, good], [1.0])
    with pytest.raises(ValueError, match="missing"):
        c.tell({"temp": 50.0}, 1.0)
    assert c.observations == []  # nothing half-added
    c.tell([good, list(good.values())], [0.5, 0.7])
    assert len(Campaign.load(c.path).observations) == 2
    with pytest.raises(ValueError, match="exists"):
        Campaign.create(c.path, SPACE)
    with pytest.raises(ValueError, match="n >= 1"):
        c.ask(0)
    # corrupt files
    for text, match in [("{not json", "not JSON"), ('{"version": 1, "space": []}', "corrupt"),
                        ('[1, 2]', "corrupt"), ("", "not JSON")]:
        c.path.write_text(text)
        with pytest.raises(CampaignFileError, match=match):
            Campaign.load(c.path)
    with pytest.raises(CampaignFileError, match="does not exist"):
        Campaign.load(tmp_path / "missing.json")


def test_bo_round_pool_mode_and_hand_preference(tmp_path):
    rng = np.random.default_rng(0)
    pool = [[float(rng.uniform(20, 100)), float(rng.uniform(0, 2)), ["water", "ethanol"][i % 2]] for i in range(64)]
    c = Campaign.create(tmp_path / "pool.json", SPACE, pool=pool, **SMALL)
    seen = []
    for _ in range(2):
        xs = c.ask(2)
        for p in xs:
            assert [p["temp"], p["conc"], p["solvent"]] in pool and p not in seen
        seen += xs
        c.tell(xs, [objective(p) for p in xs])
    # a hand-written preference replaces the oracle for this round and is recorded
    xs = c.ask(2, preference="[region, [[60, 1.0, ethanol], [80, 1.5, ethanol]], 0.9]")
    assert c.pending["preference"]["confidence"] == 0.9 and c.pending["llm"]["source"] == "user"
    assert all(p not in seen for p in xs)
    with pytest.raises(PreferenceParseError):
        c.ask(2, preference="somewhere warm")


def test_cli_init_ask_tell_status(tmp_path, capsys):
    space_file = tmp_path / "space.json"
    space_file.write_text(json.dumps(SPACE.to_json()))
    camp = str(tmp_path / "lab.json")
    assert iclr26(["bo", "init", camp, "--space", str(space_file), "--n-init", "4"]) == 0
    assert iclr26(["bo", "ask", camp, "-n", "2"]) == 0
    out = capsys.readouterr().out
    xs = json.loads(out[out.index("["):])
    assert len(xs) == 2 and set(xs[0]) == {"temp", "conc", "solvent"}
    assert iclr26(["bo", "tell", camp, "--x", json.dumps(xs[0]), "--y", "0.25"]) == 0
    csv_file = tmp_path / "results.csv"
    csv_file.write_text("temp,conc,solvent,y\n" + f"{xs[1]['temp']},{xs[1]['conc']},{xs[1]['solvent']},0.5\n")
    assert iclr26(["bo", "tell", camp, "--csv", str(csv_file)]) == 0
    capsys.readouterr()
    assert iclr26(["bo", "status", camp, "--plot", str(tmp_path / "best.png")]) == 0
    st = json.loads(capsys.readouterr().out.split("\nwrote")[0])
    assert st["observations"] == 2 and st["best"]["y"] == 0.5 and (tmp_path / "best.png").stat().st_size > 0
    # errors: one line, exit status 2
    assert iclr26(["bo", "tell", camp, "--x", '{"temp": 500, "conc": 1, "solvent": "water"}', "--y", "1"]) == 2
    assert "outside the bounds" in capsys.readouterr().err
    assert iclr26(["bo", "tell", camp, "--x", json.dumps(xs[0]), "--y", "nan"]) == 2
    assert "not finite" in capsys.readouterr().err
    (tmp_path / "broken.json").write_text("{")
    assert iclr26(["bo", "status", str(tmp_path / "broken.json")]) == 2
    assert "corrupt" in capsys.readouterr().err
