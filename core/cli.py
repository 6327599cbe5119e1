"""The `iclr26` command: list, run, demo and report the registered experiments."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

EPILOG = """\
examples:
  iclr26 list                                     experiments, their papers and presets
  iclr26 run cad --help                           one experiment's presets and config fields
  iclr26 info cad                                 its paper, status, data options and latest result
  iclr26 run regression --preset tiny             one experiment, written to runs/regression-tiny
  iclr26 run phaseformer --preset etth1_96 --set seed=1 --workdir runs/pf
  iclr26 demo                                     every method's demo preset, one summary table
  iclr26 report runs/demo                         re-render a run folder's table and plots

multi-host (a TPU pod or several GPU nodes): run the same `iclr26 run ...` on every host with
  --coordinator HOST:PORT --num-processes N --process-id I   (or JAX_COORDINATOR_ADDRESS,
  JAX_NUM_PROCESSES, JAX_PROCESS_ID in the environment).
"""


class CLIError(Exception):
    """A user error: printed as one line, exit status 2."""


def _experiments():
    from core import registry
    return registry.experiments()


def _format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in header]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# What every run records about itself (the report gives seconds and compile seconds their own columns);
# the headline is the method's own numbers.
_RUN_BOOKKEEPING = ("wall_seconds", "compile_seconds", "backend_compiles", "compile_cache_hits",
                    "compile_cache_misses")


def _headline(metrics: dict[str, Any], limit: int = 4) -> str:
    if "FAILED" in metrics:
        return f"FAILED: {metrics['FAILED']}"[:120]
    items = [(k, v) for k, v in metrics.items()
             if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in _RUN_BOOKKEEPING]
    return ", ".join(f"{k}={_fmt(v)}" for k, v in items[:limit])


def _prepare_workdir(workdir: pathlib.Path) -> pathlib.Path:
    workdir = workdir.expanduser().absolute()
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        probe = workdir / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise CLIError(f"--workdir {workdir}: not writable ({err.strerror or err}); choose a folder you can "
                       "write to") from None
    return workdir


def _read_json_object(path: pathlib.Path, what: str, fix: str = "") -> dict[str, Any]:
    """A JSON object file the CLI wrote earlier, or one line naming the file and what is wrong with it."""
    fix = f"; {fix}" if fix else ""
    try:
        record = json.loads(path.read_text())
    except IsADirectoryError:
        raise CLIError(f"{path}: expected {what} (a file), found a folder{fix}") from None
    except OSError as err:
        raise CLIError(f"{path}: cannot read {what} ({err.strerror or err}){fix}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CLIError(f"{path}: expected {what} (JSON), got unreadable JSON ({err}){fix}") from None
    if not isinstance(record, dict):
        raise CLIError(f"{path}: expected {what} (a JSON object), got a JSON {type(record).__name__}{fix}")
    return record


def _read_config_record(path: pathlib.Path) -> dict[str, Any]:
    """The workdir's config.json (experiment, preset, config) of an earlier run."""
    fix = "delete it to start afresh in this folder, or use a new --workdir"
    record = _read_json_object(path, "the config record of an earlier run", fix)
    if not isinstance(record.get("config", {}), dict):
        raise CLIError(f"{path}: expected 'config' to be a JSON object, got {type(record['config']).__name__}; "
                       f"{fix}")
    return record


def _check_config_file(workdir: pathlib.Path, name: str, preset: str, config: Any) -> None:
    from core import config as config_lib
    path = workdir / "config.json"
    record = {"experiment": name, "preset": preset, "config": config_lib.to_dict(config)}
    if path.exists() or path.is_symlink():
        old = _read_config_record(path)
        if old.get("experiment") != name or old.get("config") != record["config"]:
            changed = sorted(k for k in set(old.get("config", {})) | set(record["config"])
                             if old.get("config", {}).get(k) != record["config"].get(k))
            raise CLIError(f"--workdir {workdir} holds a run of {old.get('experiment')!r} with another config "
                           f"(differs in: {', '.join(changed) or 'experiment'}); use a new --workdir to start "
                           "afresh, or the same settings to resume")
    import jax
    if jax.process_index() == 0:
        path.write_text(json.dumps(record, indent=2) + "\n")


def run_experiment(name: str, preset: str | None, overrides: Sequence[str], workdir: pathlib.Path | None,
                   ) -> tuple[dict[str, Any], pathlib.Path, float]:
    from core import config as config_lib
    from core import registry
    from core.compilation import CompileTimer
    from core.train import write_metrics
    exp = registry.get(name)
    preset = preset or exp.demo_preset
    try:
        config = exp.config(preset)
    except KeyError as err:
        raise CLIError(err.args[0]) from None
    config = config_lib.apply_overrides(config, overrides)
    import jax
    config_lib.check_common_fields(config, device_count=jax.device_count())
    workdir = _prepare_workdir(workdir or pathlib.Path("runs") / f"{name}-{preset}")
    _check_config_file(workdir, name, preset, config)
    start = time.perf_counter()
    with CompileTimer() as compile_timer:
        metrics = dict(exp.run(config, workdir))
    seconds = time.perf_counter() - start
    metrics.setdefault("wall_seconds", round(seconds, 2))
    for key, value in compile_timer.summary().items():  # how much of the wall time was compiling
        metrics.setdefault(key, value)
    write_metrics(workdir, metrics)
    return metrics, workdir, seconds


MAX_LISTED_PRESETS = 5


def experiment_help(name: str, preset: str | None = None) -> str:
    """An experiment's presets with their runtimes and its config as a table (field, type, value in `preset`,
    allowed values, meaning), read from the config dataclasses so that it never drifts from the code."""
    from core import registry
    from core.config import describe
    exp = registry.get(name)
    try:
        config = exp.config(preset)
    except KeyError as err:
        raise CLIError(str(err.args[0])) from None
    preset = preset or exp.demo_preset
    rows = [[f.path, f.type, f.value, f.allowed, f.meaning] for f in describe(config)]
    return "\n".join([
        f"{exp.name} (paper {exp.paper if exp.paper is not None else '-'}): {exp.title}", "",
        _format_table(["preset", "expected runtime on 2 CPU cores"],
                      [[p, exp.runtimes.get(p, "-")] for p in exp.presets]),
        "", f"config of preset {preset!r} (the default preset is {exp.demo_preset!r}; change a field with "
            f"--set FIELD=VALUE; another preset's values: iclr26 run {exp.name} --preset NAME --help):", "",
        _format_table(["field", "type", "value", "allowed", "meaning"], rows)])


def cmd_list(args: argparse.Namespace) -> int:
    if args.name:
        print(experiment_help(args.name, args.preset))
        return 0
    rows = []
    for exp in _experiments().values():
        names = list(exp.presets)
        shown = ", ".join(names[:MAX_LISTED_PRESETS])
        if len(names) > MAX_LISTED_PRESETS:
            shown += f" (+{len(names) - MAX_LISTED_PRESETS} more)"
        rows.append([exp.name, exp.paper if exp.paper is not None else "-", exp.title, shown])
    print(_format_table(["experiment", "paper", "title", "presets"], rows))
    print("\n`iclr26 list NAME` shows an experiment's presets with their expected runtimes.")
    return 0


def _method_record(paper: int | None) -> dict[str, Any] | None:
    """The paper's block of benchmarks/methods.toml (status, what is missing or scaled, data options), or None
    outside a source checkout."""
    import tomllib

    from core.results import RESULTS_DIR
    path = RESULTS_DIR.parent / "methods.toml"
    if paper is None or not path.exists():
        return None
    return next((m for m in tomllib.loads(path.read_text())["method"] if m.get("number") == paper), None)


def experiment_info(name: str) -> str:
    """What a user asks first about one experiment: its paper and status, presets with runtimes, data options,
    its README and the latest committed benchmark result with its claims."""
    from core import registry
    from core.results import RESULTS_DIR
    exp = registry.get(name)
    package = pathlib.Path(sys.modules[exp.run.__module__].__file__).parent
    readme = package / "README.md"
    lines = [f"{exp.name} (paper {exp.paper if exp.paper is not None else '-'}): {exp.title}", ""]
    method = _method_record(exp.paper)
    if method is not None:
        if method.get("claim"):
            lines.append(f"the paper's claim: {method['claim']}")
        lines.append(f"status: {method['status']}" + (f" (missing: {method['missing']})" if method.get("missing")
                                                     else ""))
        for key, label in (("scaled", "scaled down"), ("data", "data")):
            if method.get(key):
                lines.append(f"{label}: {method[key]}")
        lines.append("")
    lines += [_format_table(["preset", "expected runtime on 2 CPU cores"],
                            [[p, exp.runtimes.get(p, "-")] for p in exp.presets]), "",
              f"README: {readme if readme.exists() else '(none)'}",
              f"config fields: iclr26 run {exp.name} --help"]
    for result in (method or {}).get("results", []):
        path = RESULTS_DIR / f"{result}.json"
        if not path.exists():
            lines.append(f"\nresult {result}: not committed (benchmarks/{result}.py writes it)")
            continue
        record = json.loads(path.read_text())
        entries = record.get("claims", [])
        claims = [c for c in entries if c.get("kind") != "check"]
        checks = [c for c in entries if c.get("kind") == "check"]
        held = sum(c.get("held") is True for c in claims)
        passed = sum(c.get("held") is True for c in checks)
        lines += ["", f"result {path} (commit {str(record.get('git_commit', '?'))[:12]}, "
                      f"{record.get('wall_seconds', '?')} s): {held}/{len(claims)} claims held"
                      + (f", {passed}/{len(checks)} sanity checks passed" if checks else ""),
                  f"  command: {record.get('command', '?')}"]
        for c in claims:
            lines.append(f"  claim {c.get('id')}: "
                         f"{({True: 'held', False: 'not held'}).get(c.get('held'), 'inconclusive')}")
        for c in checks:
            lines.append(f"  check {c.get('id')}: {({True: 'passed', False: 'FAILED'}).get(c.get('held'), 'not run')}")
    return "\n".join(lines)


def cmd_info(args: argparse.Namespace) -> int:
    print(experiment_info(args.name))
    return 0


def _check_multihost_flags(coordinator: str | None, num_processes: int | None, process_id: int | None,
                           ) -> tuple[str | None, int | None, int | None]:
    """The multi-host settings (flags, else JAX_* environment variables), checked before JAX starts: a process
    count or id without a coordinator would run single-process silently, and two hosts would share a workdir."""
    env = os.environ
    coordinator = coordinator or env.get("JAX_COORDINATOR_ADDRESS") or None

    def env_int(flag: str, name: str, value: int | None) -> int | None:
        if value is not None or not env.get(name):
            return value
        try:
            return int(env[name])
        except ValueError:
            raise CLIError(f"{name}={env[name]!r}: expected an integer ({flag})") from None

    num_processes = env_int("--num-processes", "JAX_NUM_PROCESSES", num_processes)
    process_id = env_int("--process-id", "JAX_PROCESS_ID", process_id)
    if coordinator is None:
        given = [f for f, v in (("--num-processes", num_processes), ("--process-id", process_id)) if v is not None]
        if given and not (num_processes in (None, 1) and process_id in (None, 0)):
            raise CLIError(f"{' and '.join(given)} given without --coordinator HOST:PORT (or "
                           "JAX_COORDINATOR_ADDRESS): expected all three for a multi-host run, or none")
        return None, None, None
    if ":" not in coordinator or not coordinator.rsplit(":", 1)[1].isdigit():
        raise CLIError(f"--coordinator {coordinator!r}: expected HOST:PORT, e.g. 10.0.0.1:1234")
    if num_processes is None or process_id is None:
        raise CLIError(f"--coordinator {coordinator} needs --num-processes N and --process-id I (or "
                       "JAX_NUM_PROCESSES, JAX_PROCESS_ID)")
    if num_processes < 1:
        raise CLIError(f"--num-processes {num_processes}: expected at least 1")
    if not 0 <= process_id < num_processes:
        raise CLIError(f"--process-id {process_id}: expected 0 <= id < --num-processes {num_processes}")
    return coordinator, num_processes, process_id


def cmd_run(args: argparse.Namespace) -> int:
    if args.help:  # argparse's own -h exits 0 after printing; so does this one, after the experiment's table
        text = args.parser.format_help()
        if args.name:
            text += "\n" + experiment_help(args.name, args.preset) + "\n"
        print(text, end="")
        raise SystemExit(0)
    if not args.name:
        args.parser.error("the following arguments are required: name")
    from core.sharding import initialize_distributed
    initialize_distributed(*_check_multihost_flags(args.coordinator, args.num_processes, args.process_id))
    overrides = [item for group in args.set or [] for item in group]
    _enable_compile_cache(args)
    if args.logger:
        from core.train import set_loggers
        set_loggers(args.logger)
    metrics, workdir, seconds = run_experiment(args.name, args.preset, overrides, args.workdir)
    import jax
    if jax.process_index() == 0:
        print(_format_table(["metric", "value"], sorted(metrics.items())))
        compiling = metrics.get("compile_seconds")
        detail = f" ({compiling:.1f} s of it compiling)" if isinstance(compiling, (int, float)) else ""
        print(f"\nwrote {workdir}/metrics.json and plots in {seconds:.1f} s{detail}")
    return 0


def _enable_compile_cache(args: argparse.Namespace) -> None:
    """JAX's persistent compilation cache for this CLI process, unless --no-compile-cache (see core.compilation)."""
    if not args.no_compile_cache:
        from core.compilation import enable_persistent_cache
        enable_persistent_cache()


def default_demo_jobs() -> int:
    """Demos run at once by `iclr26 demo`: on CPU the core count, up to 4 (one short demo leaves cores idle
    while it compiles and runs Python: on the idle 2-core machine the whole cold demo took 415 s two at a time
    against 495 s one after another); 1 where an accelerator is visible (each process would claim the whole
    GPU's memory, and a TPU opens in one process only). Decided without starting JAX, whose first use in this
    process would itself claim the accelerator."""
    platforms = os.environ.get("JAX_PLATFORMS", "").strip().lower()
    if platforms and platforms != "cpu":
        return 1
    if not platforms and any(os.path.exists(d) for d in ("/dev/nvidia0", "/dev/accel0", "/dev/kfd", "/dev/vfio/0")):
        return 1
    return max(1, min(4, os.cpu_count() or 1))


def cmd_demo(args: argparse.Namespace) -> int:
    experiments = _experiments()
    methods = [e for e in experiments.values() if e.paper is not None and e.in_demo]
    skipped = [e.name for e in experiments.values() if e.paper is not None and not e.in_demo]
    if args.only:
        methods, skipped = [experiments[n] if n in experiments else _unknown(n) for n in args.only], []
    note = ""
    if skipped:
        print(f"Not in the combined demo (too long; run `iclr26 demo --only NAME`): {', '.join(skipped)}\n")
    if not methods:
        methods = [experiments["regression"]]
        note = ("No paper's method has landed yet: the demo runs the built-in regression example, which "
                "exercises the core scaffold (config, sharded jitted step, checkpoints, metrics, plots).")
        print(note + "\n")
    if args.jobs is not None and args.jobs < 1:
        raise CLIError(f"--jobs {args.jobs}: expected at least 1 demo at a time")
    jobs = min(args.jobs or default_demo_jobs(), len(methods))
    root = _prepare_workdir(args.workdir)
    start = time.perf_counter()
    if jobs > 1:
        summary = _demos_in_processes(methods, root, args.preset, jobs, args.no_compile_cache)
    else:
        _enable_compile_cache(args)
        summary = [_demo_in_process(exp, root, args.preset or exp.demo_preset) for exp in methods]
    wall = round(time.perf_counter() - start, 1)
    (root / "summary.json").write_text(json.dumps({"note": note, "jobs": jobs, "wall_seconds": wall,
                                                   "runs": summary}, indent=2, default=str) + "\n")
    print()
    print(render_report(root))
    print(f"\nthe whole demo: {wall:.0f} s, {jobs} at a time\nwrote {root}/report.md")
    failed = [r["experiment"] for r in summary if "FAILED" in r["metrics"]]
    if failed:
        print(f"iclr26: error: the demo of {', '.join(failed)} failed (its error above)", file=sys.stderr)
        return 1
    return 0


def _demo_record(exp: Any, preset: str, seconds: float, metrics: dict[str, Any], workdir: pathlib.Path
                 ) -> dict[str, Any]:
    return {"experiment": exp.name, "paper": exp.paper, "title": exp.title, "preset": preset,
            "seconds": round(seconds, 1), "metrics": metrics, "workdir": str(workdir)}


def _demo_in_process(exp: Any, root: pathlib.Path, preset: str) -> dict[str, Any]:
    print(f"== {exp.name} (paper {exp.paper if exp.paper is not None else '-'}): preset {preset}", flush=True)
    start = time.perf_counter()
    try:
        metrics, workdir, seconds = run_experiment(exp.name, preset, [], root / exp.name)
    except Exception as err:  # one broken demo must not hide the others; reported and exit status 1
        traceback.print_exc()
        metrics, workdir, seconds = ({"FAILED": f"{type(err).__name__}: {err}"}, root / exp.name,
                                     time.perf_counter() - start)
    return _demo_record(exp, preset, seconds, metrics, workdir)


def _demos_in_processes(methods: Sequence[Any], root: pathlib.Path, preset: str | None, jobs: int,
                        no_compile_cache: bool) -> list[dict[str, Any]]:
    """Each demo as `iclr26 run NAME --preset P --workdir ROOT/NAME` in its own process, `jobs` at a time; a
    demo's output goes to ROOT/NAME/demo.log (shown here when it fails). Records come back in `methods` order.

    The processes are forked from one server that has imported the common libraries (`core.demo_worker`), so
    they are paid for once; where the platform has no forkserver, each demo is a fresh `python -m core.cli`."""
    import multiprocessing
    import subprocess

    import core
    forked = "forkserver" in multiprocessing.get_all_start_methods()
    if forked:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["core.demo_worker"])
    env = dict(os.environ)
    package_root = str(pathlib.Path(core.__file__).resolve().parent.parent)  # the checkout or site-packages
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in [env.get("PYTHONPATH")] if p])
    pending, running, records = list(methods), {}, {}
    print(f"running {len(methods)} demos, {jobs} at a time (each one's output: {root}/NAME/demo.log)", flush=True)
    while pending or running:
        while pending and len(running) < jobs:
            exp = pending.pop(0)
            exp_preset = preset or exp.demo_preset
            workdir = _prepare_workdir(root / exp.name)
            argv = ["run", exp.name, "--preset", exp_preset, "--workdir", str(workdir)] + (
                ["--no-compile-cache"] if no_compile_cache else [])
            if forked:
                from core.demo_worker import run_demo
                proc = context.Process(target=run_demo, args=(argv, str(workdir / "demo.log")), name=exp.name)
                proc.start()
                log = None
            else:
                log = open(workdir / "demo.log", "w")  # noqa: SIM115 (closed when the process ends)
                proc = subprocess.Popen([sys.executable, "-m", "core.cli", *argv], stdout=log,
                                        stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
            running[proc] = (exp, exp_preset, workdir, log, time.perf_counter())
            print(f"== {exp.name} (paper {exp.paper if exp.paper is not None else '-'}): preset {exp_preset}, "
                  "started", flush=True)
        time.sleep(0.1)
        for proc in [p for p in running if _exit_status(p) is not None]:
            exp, exp_preset, workdir, log, started = running.pop(proc)
            seconds = time.perf_counter() - started
            status = _exit_status(proc)
            if log is not None:
                log.close()
            metrics_path = workdir / "metrics.json"
            if status == 0 and metrics_path.exists():
                metrics = _read_json_object(metrics_path, "a run's metrics")
                print(f"   {exp.name}: done in {seconds:.0f} s", flush=True)
            else:
                log_file = workdir / "demo.log"
                text = log_file.read_text(errors="replace") if log_file.exists() else ""
                lines = [line for line in text.splitlines() if line.strip()]
                reason = lines[-1].strip() if lines else f"exit status {status}, no output"
                metrics = {"FAILED": reason.removeprefix("iclr26: error: ")}
                print(f"   {exp.name}: FAILED after {seconds:.0f} s; the end of {log_file}:\n"
                      + "\n".join(lines[-20:]), file=sys.stderr, flush=True)
            records[exp.name] = _demo_record(exp, exp_preset, seconds, metrics, workdir)
    return [records[exp.name] for exp in methods]


def _exit_status(proc: Any) -> int | None:
    """A demo process's exit status (None while it runs), a `multiprocessing.Process` or a `subprocess.Popen`."""
    return proc.poll() if hasattr(proc, "poll") else proc.exitcode


def _unknown(name: str):
    from core import registry
    return registry.get(name)  # raises with close matches


def render_report(root: pathlib.Path) -> str:
    """Print-ready summary table of a demo folder or a single run folder; writes report.md beside it."""
    root = root.absolute()
    if (root / "summary.json").exists():
        summary = _read_json_object(root / "summary.json", "a demo summary")
        runs, note = summary.get("runs"), summary.get("note", "")
        if not isinstance(runs, list) or not all(isinstance(r, dict) and {"experiment", "metrics", "workdir"}
                                                 <= set(r) for r in runs):
            raise CLIError(f"{root / 'summary.json'}: expected 'runs', a list of records with experiment, "
                           "metrics and workdir (as `iclr26 demo` writes it)")
    elif (root / "metrics.json").exists():
        config = _read_config_record(root / "config.json") if (root / "config.json").exists() else {}
        runs = [{"experiment": config.get("experiment", root.name), "paper": None, "title": "",
                 "preset": config.get("preset", "?"), "seconds": None,
                 "metrics": _read_json_object(root / "metrics.json", "a run's metrics"), "workdir": str(root)}]
        note = ""
    else:
        raise CLIError(f"{root}: expected a run folder (metrics.json) or a demo folder (summary.json)")
    rows = [[r["experiment"], r.get("paper") if r.get("paper") is not None else "-", r.get("preset", "?"),
             r.get("seconds") if r.get("seconds") is not None else "-",
             _fmt(r["metrics"].get("compile_seconds", "-")), _headline(r["metrics"])] for r in runs]
    header = ["experiment", "paper", "preset", "seconds", "compile s", "headline metrics"]
    md = ["# iclr26 report", ""] + ([note, ""] if note else []) + [_markdown_table(header, rows), ""]
    claim_rows = _claim_rows(runs)
    claim_header = ["experiment", "the paper's claim", "this run"]
    if claim_rows:
        md += ["## The papers' claims beside this run's numbers", "",
               "A demo preset is far smaller than the paper's setting: the committed benchmark "
               "(`iclr26 info NAME`) is what tests the claim.", "", _markdown_table(claim_header, claim_rows), ""]
    for r in runs:
        folder = pathlib.Path(r["workdir"])
        pngs = sorted(folder.glob("*.png"))
        if pngs:
            md.append(f"## {r['experiment']}\n")
            md += [f"![{p.stem}]({os.path.relpath(p, root)})" for p in pngs]
            md.append("")
    (root / "report.md").write_text("\n".join(md) + "\n")
    table = _format_table(header, rows)
    if claim_rows:
        table += "\n\nThe papers' claims beside this run's numbers (the committed benchmarks test them):\n"
        table += "\n".join(f"- {e}: {c}\n    this run: {v}" for e, c, v in claim_rows)
    return table


def _claim_value(value: Any) -> str:
    if isinstance(value, dict):  # e.g. one value per sweep point
        items = list(value.items())
        text = ", ".join(f"{k}={_fmt(v)}" for k, v in items[:3])
        return f"{{{text}{', ...' if len(items) > 3 else ''}}}"
    return _fmt(value)


def _claim_rows(runs: Sequence[dict[str, Any]]) -> list[list[str]]:
    """[experiment, the paper's claim, the run's metrics named by methods.toml's demo_metrics] per run of a
    paper's method (from benchmarks/methods.toml; none outside a source checkout)."""
    out = []
    for r in runs:
        method = _method_record(r.get("paper"))
        if not method or not method.get("claim") or "FAILED" in r["metrics"]:
            continue
        keys = method.get("demo_metrics", [])
        values = ", ".join(f"{k}={_claim_value(r['metrics'][k])}" if k in r["metrics"] else f"{k}=(not reported)"
                           for k in keys) or "(no demo metric bears on it; see the benchmark)"
        out.append([r["experiment"], method["claim"], values])
    return out


def cmd_report(args: argparse.Namespace) -> int:
    print(render_report(args.dir))
    print(f"\nwrote {args.dir.absolute()}/report.md")
    return 0


def build_parser(extra_commands: bool = True) -> argparse.ArgumentParser:
    """The `iclr26` parser; `extra_commands=False` leaves out the methods' own subcommands (`iclr26 bo`, ...),
    whose registration imports their methods."""
    parser = argparse.ArgumentParser(
        prog="iclr26", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Reference JAX implementations of nineteen ICLR 2026 methods: run an experiment on "
                    "embedded data, or its paper-scale preset on your own accelerators.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("list", help="list experiments, papers, presets and expected runtimes",
                       description="List every registered experiment with its paper and presets, or one "
                                   "experiment's presets with their expected runtimes.",
                       epilog="examples:\n  iclr26 list\n  iclr26 list regression",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="show this experiment's presets, runtimes and config fields")
    p.add_argument("--preset", "-p", help="with NAME: show this preset's config values (default: the demo preset)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser(
        "run", help="run one experiment", formatter_class=argparse.RawDescriptionHelpFormatter, add_help=False,
        description="Run one experiment with a preset and overrides. The run folder gets config.json, "
                    "metrics.json, metrics.jsonl, checkpoints/ and plots; running the same command again "
                    "resumes from the last checkpoint.",
        epilog="examples:\n  iclr26 run regression --preset tiny\n"
               "  iclr26 run regression --preset demo --set lr=1e-3 --set steps=2000 --workdir runs/reg\n"
               "  iclr26 run regression --coordinator 10.0.0.1:1234 --num-processes 2 --process-id 0")
    p.add_argument("name", nargs="?", help="experiment name (see `iclr26 list`)")
    p.add_argument("-h", "--help", action="store_true",
                   help="show this help; with NAME, also the experiment's presets and config fields")
    p.add_argument("--preset", "-p", help="config preset (default: the experiment's demo preset)")
    p.add_argument("--set", "-s", action="append", nargs="+", metavar="KEY=VALUE",
                   help="override config fields, e.g. --set lr=3e-4 --set model.depth=4, or --set lr=3e-4 "
                        "model.depth=4 (repeatable; all are set, then the config is checked once)")
    p.add_argument("--workdir", "-w", type=pathlib.Path,
                   help="run folder (default: runs/NAME-PRESET); an existing one is resumed")
    p.add_argument("--coordinator", metavar="HOST:PORT", help="multi-host: the coordinator's address")
    p.add_argument("--num-processes", type=int, help="multi-host: number of processes")
    p.add_argument("--process-id", type=int, help="multi-host: this process's index")
    p.add_argument("--logger", action="append", metavar="NAME", choices=("jsonl", "tensorboard", "wandb"),
                   help="metric writers besides metrics.jsonl: tensorboard (event files in WORKDIR/tensorboard) "
                        "and / or wandb (repeatable; default: $ICLR26_LOGGERS or jsonl only)")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="do not use JAX's persistent compilation cache (default: on, in $ICLR26_COMPILE_CACHE or "
                        "~/.cache/iclr26-jax/xla; ICLR26_COMPILE_CACHE=off also turns it off)")
    p.set_defaults(func=cmd_run, parser=p)

    p = sub.add_parser("info", help="one experiment's paper, status, presets, data options, README and result",
                       description="Show one experiment's paper and status, presets with runtimes, data options, "
                                   "README and the latest committed benchmark result with its claims.",
                       epilog="example:\n  iclr26 info cad", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="experiment name (see `iclr26 list`)")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("demo", help="run every method's demo preset and print one summary table",
                       description="Run each landed method's demo preset on embedded data, print one summary "
                                   "table and write report.md with the plots.")
    p.add_argument("--workdir", "-w", type=pathlib.Path, default=pathlib.Path("runs/demo"),
                   help="folder for the runs and report.md (default: runs/demo)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these experiments")
    p.add_argument("--preset", "-p", help="run this preset of every experiment (default: each one's demo preset; "
                                          "e.g. tiny for a quick check of an install)")
    p.add_argument("--jobs", "-j", type=int, metavar="N",
                   help="demos run at once, each in its own process (default: up to 4 on CPU, the core count, "
                        "1 where a GPU or TPU is visible; 1 runs them one after another in this process)")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="do not use JAX's persistent compilation cache (default: on, in $ICLR26_COMPILE_CACHE or "
                        "~/.cache/iclr26-jax/xla; ICLR26_COMPILE_CACHE=off also turns it off)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("report", help="re-render a run folder's table and report.md",
                       description="Re-render the summary table and report.md of a demo or run folder.")
    p.add_argument("dir", type=pathlib.Path, help="a folder written by `iclr26 run` or `iclr26 demo`")
    p.set_defaults(func=cmd_report)

    if extra_commands:
        from core import registry
        for _, register in registry.command_registrars():
            register(sub)
    return parser


BUILTIN_COMMANDS = ("list", "run", "info", "demo", "report")


def guarded(func: Any, *args: Any) -> int:
    """`func(*args)` as the CLI runs it: its exit status, or 2 and one line on stderr for the user's errors.

    Bad input (configs, loaders, checkpoints: all raise BadInputError or a subclass), a missing file, and a
    diverged run (non-finite loss or parameters) are the user's to fix. Anything else is a bug and keeps its
    traceback."""
    from core.config import BadInputError
    from core.registry import UnknownExperimentError
    try:
        return func(*args)
    except (CLIError, BadInputError, UnknownExperimentError, FileNotFoundError, FloatingPointError) as err:
        print(f"iclr26: error: {one_line(err)}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(extra_commands=not argv or argv[0] not in BUILTIN_COMMANDS)
    args = parser.parse_args(argv)
    return guarded(args.func, args)


def one_line(err: BaseException) -> str:
    """The error's message on one line (loaders may quote multi-line text)."""
    return " ".join(str(err).split()) or type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
