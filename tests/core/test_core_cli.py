"""The iclr26 command, driven in-process for errors and as a subprocess for the SIGKILL-resume test."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from core import cli, example
from core.checkpoint import Checkpointer


def _run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_help_and_list_read_like_a_researchers_tool(capsys):
    for argv in (["--help"], ["run", "--help"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 0
        out = capsys.readouterr().out
        assert "usage: iclr26" in out and "examples:" in out
    code, out, _ = _run_cli(capsys, "list")
    assert code == 0 and "regression" in out and "built-in regression example" in out
    code, out, _ = _run_cli(capsys, "list", "regression")
    assert code == 0 and "tiny    ~10 s" in out and "demo    ~20 s" in out
    code, _, err = _run_cli(capsys, "list", "regresion")
    assert code == 2 and "did you mean regression?" in err


def test_unknown_experiment_names_the_close_matches(capsys):
    code, _, err = _run_cli(capsys, "run", "regresion")
    assert code == 2
    assert "unknown experiment 'regresion'; did you mean regression?" in err


def test_bad_set_field_and_value(capsys, tmp_path):
    code, _, err = _run_cli(capsys, "run", "regression", "--preset", "tiny", "--set", "stesp=3",
                            "--workdir", str(tmp_path))
    assert code == 2 and "unknown config field 'stesp' in RegressionConfig" in err and "did you mean steps" in err
    code, _, err = _run_cli(capsys, "run", "regression", "--set", "lr=-1", "--workdir", str(tmp_path))
    assert code == 2 and "lr=-1.0: expected a positive learning rate" in err
    code, _, err = _run_cli(capsys, "run", "regression", "--preset", "huge", "--workdir", str(tmp_path))
    assert code == 2 and "has no preset 'huge' (presets: tiny, demo)" in err


def test_unwritable_workdir(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code, _, err = _run_cli(capsys, "run", "regression", "--workdir", str(blocker / "run"))
    assert code == 2 and f"--workdir {blocker / 'run'}: not writable" in err


def test_workdir_of_another_config_is_refused(capsys, tmp_path):
    code, _, _ = _run_cli(capsys, "run", "regression", "--preset", "tiny", "--set", "steps=50",
                          "--workdir", str(tmp_path))
    assert code == 0 and (tmp_path / "metrics.json").exists()
    code, _, err = _run_cli(capsys, "run", "regression", "--preset", "tiny", "--set", "steps=50",
                            "--set", "hidden=16", "--workdir", str(tmp_path))
    assert code == 2 and "holds a run of 'regression' with another config (differs in: hidden)" in err
    code, out, _ = _run_cli(capsys, "report", str(tmp_path))
    assert code == 0 and "eval_mse=" in out and (tmp_path / "report.md").exists()


def _checkpoint_params(workdir: pathlib.Path, config):
    """The final checkpoint's parameters, restored through the same code path a resume uses."""
    import jax
    import optax
    from flax import nnx

    from core.train import init_train_state
    model = example.MLP(config.features, config.hidden, rngs=nnx.Rngs(config.seed))
    _, params = nnx.split(model, nnx.Param)
    template = init_train_state(params, optax.adam(config.lr), jax.random.key(config.seed))
    state, _ = Checkpointer(workdir / "checkpoints", config=config).restore(template)
    return jax.tree.leaves(jax.device_get(state.params))


@pytest.mark.multiprocess
def test_sigkilled_run_resumes_to_bitwise_equal_parameters(tmp_path):
    from core.config import apply_overrides
    overrides = ["steps=1500", "ckpt_every=100", "log_every=100"]
    config = apply_overrides(example.PRESETS["tiny"], overrides)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    command = [sys.executable, "-m", "core.cli", "run", "regression", "--preset", "tiny",
               *[a for o in overrides for a in ("--set", o)]]

    killed = tmp_path / "killed"
    proc = subprocess.Popen(command + ["--workdir", str(killed)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    last = killed / "checkpoints" / "last"
    while time.time() < deadline and proc.poll() is None:
        if last.exists() and any(p.name.isdigit() and int(p.name) >= 200 for p in last.iterdir()):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed mid-way"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    steps_done = max(int(p.name) for p in last.iterdir() if p.name.isdigit())
    assert 200 <= steps_done < 1500 and not (killed / "metrics.json").exists()

    for workdir in (killed, tmp_path / "straight"):  # a rare SIGABRT here (stops 53, 65): show its stderr
        done = subprocess.run(command + ["--workdir", str(workdir)], env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{workdir.name} run exited {done.returncode}: {done.stderr[-3000:]}"
    for a, b in zip(_checkpoint_params(killed, config), _checkpoint_params(tmp_path / "straight", config)):
        np.testing.assert_array_equal(a, b)


def test_demo_prints_the_summary_table_and_writes_the_report(capsys, tmp_path, monkeypatch):
    from core import registry
    tiny = {**registry.experiments()}
    regression = tiny["regression"]
    import dataclasses
    # the demo of the built-in example, at its tiny preset to keep the suite fast
    monkeypatch.setattr(registry, "experiments",
                        lambda: {"regression": dataclasses.replace(regression, demo_preset="tiny")})
    code, out, _ = _run_cli(capsys, "demo", "--workdir", str(tmp_path))
    assert code == 0
    assert "No paper's method has landed yet" in out
    assert "regression  -      tiny" in out and "eval_mse=" in out
    report = (tmp_path / "report.md").read_text()
    assert "| regression | - | tiny |" in report and "![loss](regression/loss.png)" in report


def test_demo_leaves_out_methods_marked_not_in_demo_and_names_them(capsys, tmp_path, monkeypatch):
    import dataclasses

    from core import registry
    regression = registry.experiments()["regression"]

    def must_not_run(config, workdir):
        raise AssertionError("a method with in_demo=False ran in the combined demo")

    fast = dataclasses.replace(regression, name="fast", paper=1, demo_preset="tiny")
    slow = dataclasses.replace(regression, name="slowpoke", paper=2, run=must_not_run, in_demo=False)
    monkeypatch.setattr(registry, "experiments", lambda: {"fast": fast, "slowpoke": slow})
    code, out, _ = _run_cli(capsys, "demo", "--workdir", str(tmp_path))
    assert code == 0
    assert "Not in the combined demo (too long; run `iclr26 demo --only NAME`): slowpoke" in out
    assert "fast" in (tmp_path / "report.md").read_text() and "slowpoke" not in (tmp_path / "report.md").read_text()


def test_a_diverging_run_is_one_line_exit_2_and_writes_no_non_finite_checkpoint(capsys, tmp_path):
    # issue #49: checkpoints (every 10 steps) far more frequent than logging (every 100); adam at lr=1e30 diverges
    # at step 2, so not one checkpoint is finite and none may be written
    code, _, err = _run_cli(capsys, "run", "regression", "--preset", "tiny", "--set", "lr=1e30", "--set",
                            "ckpt_every=10", "--set", "log_every=100", "--workdir", str(tmp_path))
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("iclr26:")]
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("iclr26: error: non-finite loss at step 2 (checked steps 1-10 before writing a "
                               "checkpoint); no finite checkpoint was written, so a rerun starts afresh")
    checkpoints = Checkpointer(tmp_path / "checkpoints", best_metric="mse")
    assert checkpoints.latest_step() is None and checkpoints.best_step() is None


def test_multihost_settings_are_checked_before_jax_starts(monkeypatch):
    for name in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)
    assert cli._check_multihost_flags(None, None, None) == (None, None, None)
    assert cli._check_multihost_flags(None, 1, 0) == (None, None, None)  # one process: nothing to start
    assert cli._check_multihost_flags("10.0.0.1:1234", 2, 1) == ("10.0.0.1:1234", 2, 1)
    monkeypatch.setenv("JAX_NUM_PROCESSES", "4")  # from the environment, without a coordinator: refused
    with pytest.raises(cli.CLIError, match="--num-processes given without --coordinator"):
        cli._check_multihost_flags(None, None, None)
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "h:1")
    monkeypatch.setenv("JAX_PROCESS_ID", "x")
    with pytest.raises(cli.CLIError, match=r"JAX_PROCESS_ID='x': expected an integer"):
        cli._check_multihost_flags(None, None, None)
    monkeypatch.setenv("JAX_PROCESS_ID", "3")
    assert cli._check_multihost_flags(None, None, None) == ("h:1", 4, 3)


def test_set_takes_several_overrides_in_the_order_written(capsys, tmp_path):
    args = cli.build_parser().parse_args(["run", "regression", "--set", "a=1", "b=2", "--set", "c=3"])
    assert args.set == [["a=1", "b=2"], ["c=3"]]
    code, _, err = _run_cli(capsys, "run", "regression", "--preset", "tiny", "--set", "steps=3", "lr=-2",
                            "--workdir", str(tmp_path))
    assert code == 2 and err.strip() == "iclr26: error: lr=-2.0: expected a positive learning rate"


def test_report_prints_each_papers_claim_beside_the_runs_numbers(tmp_path):
    import json
    runs = [{"experiment": "fedftrl", "paper": 8, "title": "", "preset": "demo", "seconds": 1.0,
             "metrics": {"regret/FedFTRL/complete": 27.5, "regret/FedExp3/complete": 117.6},
             "workdir": str(tmp_path / "fedftrl")},
            {"experiment": "regression", "paper": None, "title": "", "preset": "tiny", "seconds": 1.0,
             "metrics": {"eval_mse": 0.1}, "workdir": str(tmp_path / "regression")}]
    (tmp_path / "summary.json").write_text(json.dumps({"note": "", "runs": runs}))
    out = cli.render_report(tmp_path)
    assert "- fedftrl: FedFTRL attains O(sqrt T) regret" in out
    assert "regret/FedFTRL/complete=27.5, regret/FedExp3/complete=117.6, regret/Gossip UCB/complete=(not reported)" \
        in out
    assert "regression:" not in out.split("claims beside")[-1]  # no paper, no claim
    report = (tmp_path / "report.md").read_text()
    assert "## The papers' claims beside this run's numbers" in report and "| fedftrl | FedFTRL attains" in report


def test_demos_in_parallel_processes_report_each_one_and_a_failed_one_by_its_error_line(capsys, tmp_path):
    # two demos at once, each `iclr26 run` in its own process; the second finds a run folder of another
    # experiment, so its process stops with one line, which the summary and the exit status carry
    (tmp_path / "tiny_lm").mkdir()
    (tmp_path / "tiny_lm" / "config.json").write_text(json.dumps({"experiment": "regression", "preset": "tiny",
                                                                   "config": {}}))
    code, out, err = _run_cli(capsys, "demo", "--only", "regression", "tiny_lm", "--preset", "tiny", "--jobs", "2",
                              "--workdir", str(tmp_path))
    assert code == 1
    assert "running 2 demos, 2 at a time" in out and "the whole demo:" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["jobs"] == 2 and summary["wall_seconds"] > 0
    runs = {r["experiment"]: r for r in summary["runs"]}
    assert [r["experiment"] for r in summary["runs"]] == ["regression", "tiny_lm"]
    assert runs["regression"]["metrics"]["eval_mse"] >= 0 and runs["regression"]["preset"] == "tiny"
    assert runs["tiny_lm"]["metrics"]["FAILED"].startswith(f"--workdir {tmp_path / 'tiny_lm'} holds a run of "
                                                           "'regression'")
    assert "tiny_lm: FAILED after" in err and "iclr26: error: the demo of tiny_lm failed" in err
    assert (tmp_path / "regression" / "demo.log").exists() and (tmp_path / "regression" / "metrics.json").exists()
    with pytest.raises(cli.CLIError, match="--jobs 0: expected at least 1"):
        cli.cmd_demo(cli.build_parser().parse_args(["demo", "--jobs", "0", "--workdir", str(tmp_path / "x")]))


def test_demo_server_imports_the_libraries_without_starting_jax():
    """The demos are forked from a server that imported `core.demo_worker`; a backend (an XLA client and its
    threads) started there would be inherited half-alive by every fork, so the import must start none."""
    import subprocess
    import sys

    probe = ("import core.demo_worker, jax, sys; from jax._src import xla_bridge; "
             "sys.exit(0 if not xla_bridge._backends and 'flax.nnx' in sys.modules else 3)")
    assert subprocess.run([sys.executable, "-c", probe], timeout=120).returncode == 0


def test_a_demo_process_writes_its_output_to_its_log_and_exits_with_the_cli_status(tmp_path):
    import multiprocessing

    from core.demo_worker import run_demo
    context = multiprocessing.get_context("forkserver")
    bad = context.Process(target=run_demo, args=(["run", "no_such_experiment"], str(tmp_path / "bad.log")))
    bad.start()
    bad.join(120)
    assert bad.exitcode == 2
    assert "iclr26: error: " in (tmp_path / "bad.log").read_text() and "no_such_experiment" in (
        tmp_path / "bad.log").read_text()


def test_running_one_experiment_loads_its_entry_point_only(monkeypatch):
    """`iclr26 run NAME` imports one method (all of them cost ~2 s per process); a name registered under
    another entry point (bit_e2e by bit) and the unknown-name error still go through the full table."""
    import dataclasses

    from core import registry
    regression = registry.experiments()["regression"]
    loaded = []

    class FakeEntryPoint:
        def __init__(self, name, value):
            self.name, self.value = name, value

        def load(self):
            loaded.append(self.name)
            return self.value

    eps = [FakeEntryPoint("alpha", dataclasses.replace(regression, name="alpha")),
           FakeEntryPoint("beta_gamma", [dataclasses.replace(regression, name="beta-gamma"),
                                         dataclasses.replace(regression, name="beta_gamma_e2e")]),
           FakeEntryPoint("delta", dataclasses.replace(regression, name="delta"))]
    monkeypatch.setattr(registry, "_entry_points", lambda group: eps)
    monkeypatch.setattr(registry, "experiments", registry.experiments.__wrapped__)  # no cached real table
    assert registry.get("alpha").name == "alpha" and loaded == ["alpha"]
    loaded.clear()
    assert registry.get("beta_gamma").name == "beta-gamma" and loaded == ["beta_gamma"]
    loaded.clear()
    assert registry.get("beta_gamma_e2e").name == "beta_gamma_e2e" and loaded == ["alpha", "beta_gamma", "delta"]
    with pytest.raises(registry.UnknownExperimentError, match="did you mean alpha"):
        registry.get("alpah")


def test_builtin_commands_are_the_parser_s_own():
    sub = next(a for a in cli.build_parser(extra_commands=False)._actions if a.dest == "command")
    assert sorted(sub.choices) == sorted(cli.BUILTIN_COMMANDS)
    with_extras = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert set(with_extras.choices) > set(cli.BUILTIN_COMMANDS)  # bo, cf, ivb
