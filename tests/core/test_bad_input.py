"""The bad-input suite (issue 46): every loader and the CLI answer bad input with one line on stderr and exit
status 2, naming the value (and the file); never a traceback, never a silent start.

Each case builds its input in tmp_path and runs the `iclr26` command in-process (`cli.main`), or, for a loader
that no command reaches cheaply, calls it through `cli.guarded` (the same error handling `main` uses). The
table of cases and their messages: `.venv/bin/python tests/core/test_bad_input.py` prints it (Markdown).
"""

import json
import os
import pickle
import warnings

if __name__ == "__main__":  # as a script: the same 8 fake CPU devices conftest.py gives the tests
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import cli
from core.checkpoint import Checkpointer, CorruptCheckpointWarning

ETT_HEADER = "date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT"


def _run(capsys, argv=None, func=None):
    """(exit status, stderr lines) of `iclr26 ARGV` or of `func()` under the CLI's error handling."""
    code = cli.main([str(a) for a in argv]) if argv is not None else cli.guarded(func)
    return code, capsys.readouterr().err.strip().splitlines()


def _csv(path, rows, header="date,a,b"):
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def _good_rows(n=40):
    return [f"2020-01-01 {i:02d}:00,{i * 0.1:.2f},{np.sin(i):.4f}" for i in range(n)]


def _mmsa(path, *, mutate=None, n=6):
    rng = np.random.default_rng(0)
    split = {"text": rng.normal(size=(n, 4, 3)), "audio": rng.normal(size=(n, 4, 2)),
             "vision": rng.normal(size=(n, 4, 2)), "regression_labels": rng.uniform(-3, 3, n)}
    data = {s: dict(split) for s in ("train", "valid", "test")}
    if mutate:
        data = mutate(data)
    with open(path, "wb") as f:
        pickle.dump(data, f)
    return path


def _movielens(folder, ratings="userId,movieId,rating\n1,1,4.0\n2,2,3.5\n", movies=None):
    folder.mkdir(exist_ok=True)
    (folder / "ratings.csv").write_text(ratings)
    (folder / "movies.csv").write_text(movies or "movieId,genres\n1,Drama\n2,Comedy\n")
    return folder


def _ucf(root, split_lines="Drama/v_a_c01.avi 1\n", frame=b"not an image"):
    frames, splits = root / "frames", root / "splits"
    (frames / "Drama" / "v_a_c01").mkdir(parents=True)
    (frames / "Drama" / "v_a_c01" / "img_00001.jpg").write_bytes(frame)
    splits.mkdir()
    (splits / "classInd.txt").write_text("1 Drama\n")
    (splits / "trainlist01.txt").write_text(split_lines)
    (splits / "testlist01.txt").write_text("Drama/v_a_c01.avi\n")
    return frames, splits


REG = ["run", "regression", "--preset", "tiny"]
PF = ["run", "phaseformer", "--preset", "tiny", "--set", "seq_len=8", "--set", "pred_len=4", "--set", "period=4"]
DEC = ["run", "decalign", "--preset", "tiny", "--set", "data.source=pickle"]
FED = ["run", "fedftrl", "--preset", "tiny", "--set", "setting=movielens"]
PN = ["run", "prednext", "--preset", "tiny", "--set", "source=ucf101", "--set", "model.in_channels=3"]


def _pf_csv(t, rows, header="date,a,b"):
    return PF + ["--set", f"dataset={_csv(t / 'series.csv', rows, header)}"]


def _mmsa_case(mutate):
    return lambda t: DEC + ["--set", f"data.path={_mmsa(t / 'feats.pkl', mutate=mutate)}"]


def _bytes_file(t, name, data):
    (t / name).write_bytes(data)
    return t / name


def _config_json(t, content):
    (t / "run").mkdir()
    path = t / "run" / "config.json"
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return REG + ["--workdir", t / "run"]


def _poke(data, split, key, value):
    data[split] = dict(data[split], **{key: value})
    return data


# name -> (argv builder, substrings the one line must contain); {t} is tmp_path
CLI_CASES = {
    # config values and the CLI's own flags
    "seed_negative": (lambda t: REG + ["--set", "seed=-1"], ["seed=-1: expected an integer seed in [0, 4294967295]"]),
    "steps_1e30": (lambda t: REG + ["--set", "steps=1e30"], ["steps=1000000000000000019884624838656",
                                                             "a whole number of steps in [0, 1e+09]"]),
    "steps_fraction": (lambda t: REG + ["--set", "steps=2.5"], ["steps='2.5': expected an integer"]),
    "steps_text": (lambda t: REG + ["--set", "steps=many"], ["steps='many': expected an integer"]),
    "lr_nan": (lambda t: REG + ["--set", "lr=nan"], ["lr='nan': expected a number, not NaN"]),
    "lr_negative": (lambda t: REG + ["--set", "lr=-1"], ["lr=-1.0: expected a positive learning rate"]),
    "batch_over_rows": (lambda t: REG + ["--set", "batch_size=5000"], ["batch_size=5000", "num_train=1024"]),
    "mesh_not_dividing": (lambda t: REG + ["--set", "mesh_model=3"],
                          ["mesh_model=3: expected a mesh size dividing the 8 visible device(s)"]),
    "unknown_field": (lambda t: REG + ["--set", "stepz=3"], ["unknown config field 'stepz'", "did you mean steps"]),
    "override_without_value": (lambda t: REG + ["--set", "steps"], ["override 'steps': expected KEY=VALUE"]),
    "unknown_preset": (lambda t: REG[:2] + ["--preset", "huge"], ["no preset 'huge'"]),
    "unknown_experiment": (lambda t: ["run", "regresion"], ["unknown experiment 'regresion'"]),
    "process_id_without_coordinator": (lambda t: REG + ["--num-processes", "2", "--process-id", "5"],
                                       ["--num-processes and --process-id given without --coordinator"]),
    "process_id_out_of_range": (lambda t: REG + ["--coordinator", "127.0.0.1:1", "--num-processes", "2",
                                                 "--process-id", "5"],
                                ["--process-id 5: expected 0 <= id < --num-processes 2"]),
    "coordinator_without_port": (lambda t: REG + ["--coordinator", "host0", "--num-processes", "2",
                                                  "--process-id", "0"],
                                 ["--coordinator 'host0': expected HOST:PORT"]),
    "coordinator_without_count": (lambda t: REG + ["--coordinator", "host0:1234"],
                                  ["--coordinator host0:1234 needs --num-processes N and --process-id I"]),
    "workdir_is_a_file": (lambda t: REG + ["--workdir", _bytes_file(t, "f", b"x") / "run"], ["not writable"]),
    # the workdir's config.json
    "config_json_garbage": (lambda t: _config_json(t, "{not json"),
                            ["{t}/run/config.json", "got unreadable JSON"]),
    "config_json_truncated": (lambda t: _config_json(t, '{"experiment": "regression", "config": {"ste'),
                              ["{t}/run/config.json", "unreadable JSON"]),
    "config_json_empty": (lambda t: _config_json(t, ""), ["{t}/run/config.json", "unreadable JSON"]),
    "config_json_a_list": (lambda t: _config_json(t, "[1, 2]"), ["{t}/run/config.json", "got a JSON list"]),
    "config_json_binary": (lambda t: _config_json(t, b"\xff\xfe\x00"), ["{t}/run/config.json", "unreadable JSON"]),
    "config_json_a_folder": (lambda t: (t / "run" / "config.json").mkdir(parents=True)
                             or REG + ["--workdir", t / "run"],
                             ["{t}/run/config.json: expected the config record of an earlier run (a file), "
                              "found a folder"]),
    "report_summary_garbage": (lambda t: (t / "summary.json").write_text("{{") and ["report", t],
                               ["{t}/summary.json", "unreadable JSON"]),
    "report_summary_schema": (lambda t: (t / "summary.json").write_text('{"runs": [1]}') and ["report", t],
                              ["{t}/summary.json: expected 'runs'"]),
    "report_metrics_garbage": (lambda t: (t / "metrics.json").write_text("nan]") and ["report", t],
                               ["{t}/metrics.json", "unreadable JSON"]),
    "report_empty_folder": (lambda t: ["report", t], ["{t}: expected a run folder (metrics.json)"]),
    # PhaseFormer: forecasting CSVs (forecasting/data.py)
    "csv_missing": (lambda t: PF + ["--set", f"dataset={t}/none.csv"], ["{t}/none.csv: no such data file"]),
    "csv_a_folder": (lambda t: PF + ["--set", f"dataset={t}"], ["{t}: is a folder; expected a CSV file"]),
    "csv_empty": (lambda t: PF + ["--set", f"dataset={_bytes_file(t, 'e.csv', b'')}"],
                  ["{t}/e.csv: empty file; expected a CSV file"]),
    "csv_binary": (lambda t: PF + ["--set", f"dataset={_bytes_file(t, 'b.csv', bytes(range(128, 256)))}"],
                   ["{t}/b.csv: not a readable text CSV (UnicodeDecodeError"]),
    "csv_no_date_column": (lambda t: _pf_csv(t, _good_rows(), header="time,a,b"),
                           ["{t}/series.csv: first column is ['time']; expected the date column 'date'"]),
    "csv_truncated_line": (lambda t: _pf_csv(t, _good_rows() + ["2020-01-03 00:00,1.5"]),
                           ["{t}/series.csv: data line 42 has 2 fields; expected 3"]),
    "csv_non_numeric": (lambda t: _pf_csv(t, _good_rows() + ["2020-01-03 00:00,abc,1"]),
                        ["{t}/series.csv: non-numeric value", "abc"]),
    "csv_nan": (lambda t: _pf_csv(t, _good_rows() + ["2020-01-03 00:00,nan,1"]),
                ["{t}/series.csv: 1 missing or non-finite values, the first 'nan' in column 'a' on data line 42"]),
    "csv_inf": (lambda t: _pf_csv(t, ["2020-01-03 00:00,1,inf"] + _good_rows()),
                ["{t}/series.csv", "the first 'inf' in column 'b' on data line 2"]),
    "window_longer_than_data": (lambda t: ["run", "phaseformer", "--preset", "tiny", "--set", "seq_len=100000"],
                                ["ETTh1.csv: seq_len=100000: longer than the training split (8640 rows)"]),
    # DecAlign: MMSA pickles (multimodal/decalign/data.py)
    "pickle_path_unset": (lambda t: DEC, ["data.path='': expected the path of an MMSA pickle"]),
    "pickle_missing": (lambda t: DEC + ["--set", f"data.path={t}/none.pkl"], ["{t}/none.pkl: no such MMSA pickle"]),
    "pickle_a_folder": (lambda t: DEC + ["--set", f"data.path={t}"], ["{t}: is a folder; expected an MMSA"]),
    "pickle_empty": (lambda t: DEC + ["--set", f"data.path={_bytes_file(t, 'e.pkl', b'')}"],
                     ["{t}/e.pkl: empty file; expected an MMSA feature pickle"]),
    "pickle_truncated": (lambda t: DEC + ["--set", "data.path=" + str(_bytes_file(
        t, "cut.pkl", (_mmsa(t / "full.pkl").read_bytes())[:200]))],
        ["{t}/cut.pkl: not a readable pickle"]),
    "pickle_not_a_dict": (lambda t: DEC + ["--set", "data.path=" + str(_bytes_file(t, "l.pkl", pickle.dumps([1])))],
                          ["{t}/l.pkl: top level: expected a dict with keys ('train', 'valid', 'test'), got list"]),
    "pickle_missing_split": (_mmsa_case(lambda d: {k: v for k, v in d.items() if k != "valid"}),
                             ["{t}/feats.pkl: top level: missing split 'valid'"]),
    "pickle_wrong_shape": (_mmsa_case(lambda d: _poke(d, "train", "text", np.zeros((6, 3)))),
                           ["{t}/feats.pkl: train.text: shape (6, 3): expected (N, L, D)"]),
    "pickle_nan_features": (_mmsa_case(lambda d: _poke(d, "test", "audio", np.full((6, 4, 2), np.nan))),
                            ["{t}/feats.pkl: test.audio: 48 NaN values: expected finite features"]),
    "pickle_text_features": (_mmsa_case(lambda d: _poke(d, "train", "vision", np.full((6, 4, 2), "x"))),
                             ["{t}/feats.pkl: train.vision: dtype <U1: expected numeric features"]),
    "pickle_labels_out_of_range": (_mmsa_case(lambda d: _poke(d, "valid", "regression_labels", np.full(6, 9.0))),
                                   ["{t}/feats.pkl: valid.regression_labels: values in [9, 9]"]),
    # FedFTRL: MovieLens folders (optimization/fedftrl/envs.py)
    "movielens_path_unset": (lambda t: FED, ["ratings_path=''"]),
    "movielens_missing": (lambda t: FED + ["--set", f"ratings_path={t}/ml"], ["{t}/ml' has no ratings.csv"]),
    "movielens_a_file": (lambda t: FED + ["--set", f"ratings_path={_bytes_file(t, 'r.csv', b'x')}"],
                         ["{t}/r.csv: is a file; expected a folder"]),
    "movielens_empty_csv": (lambda t: FED + ["--set", f"ratings_path={_movielens(t / 'ml', ratings='')}"],
                            ["{t}/ml/ratings.csv: empty file"]),
    "movielens_wrong_columns": (lambda t: FED + ["--set", "ratings_path=" + str(_movielens(
        t / "ml", ratings="user,movie,stars\n1,1,4\n"))], ["{t}/ml/ratings.csv lacks column(s) ['userId'"]),
    "movielens_non_numeric": (lambda t: FED + ["--set", "ratings_path=" + str(_movielens(
        t / "ml", ratings="userId,movieId,rating\n1,1,4.0\n2,2,good\n"))],
        ["{t}/ml/ratings.csv: rating='good' on data line 3"]),
    "movielens_nan": (lambda t: FED + ["--set", "ratings_path=" + str(_movielens(
        t / "ml", ratings="userId,movieId,rating\n1,1,\n2,2,3\n"))],
        ["{t}/ml/ratings.csv: rating=(blank) on data line 2"]),
    "movielens_out_of_range": (lambda t: FED + ["--set", "ratings_path=" + str(_movielens(
        t / "ml", ratings="userId,movieId,rating\n1,1,7\n2,2,3\n"))], ["ratings must be half stars in [0.5, 5]"]),
    # PredNext: UCF101 frame folders and split files (forecasting/prednext/data.py)
    "frames_rgb_needs_3_channels": (lambda t: ["run", "prednext", "--preset", "tiny", "--set", "source=ucf101",
                                               "--set", f"data_root={t}", "--set", f"split_dir={t}"],
                                    ["model.in_channels=1: expected 3 with source='ucf101'"]),
    "frames_preset_paths_absent": (lambda t: ["run", "prednext", "--preset", "ucf101", "--set", "train.steps=1",
                                              "--workdir", t / "run"],
                                   ["/data/ucf101/frames: no such folder; expected ucf101 frames"]),
    "frames_split_dir_empty": (lambda t: PN + ["--set", f"data_root={t}", "--set", f"split_dir={t}"],
                               ["{t}/classInd.txt: expected the UCF101 split file"]),
    "frames_split_line_garbled": (lambda t: PN + [a for pair in zip(["--set"] * 2, [
        f"data_root={_ucf(t, split_lines='just-a-name 1')[0]}", f"split_dir={t}/splits"]) for a in pair],
        ["{t}/splits/trainlist01.txt:1: line 'just-a-name 1': expected '<ClassName>/<video>.avi [label]'"]),
}


def _check_one_line(code, lines, expected, tmp_path):
    assert code == 2, (code, lines)
    assert len(lines) == 1, lines
    assert lines[0].startswith("iclr26: error: "), lines
    for text in expected:
        assert text.replace("{t}", str(tmp_path)) in lines[0], (text, lines[0])


@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_cli_bad_input_is_one_line_exit_2_naming_the_value(name, tmp_path, capsys):
    build, expected = CLI_CASES[name]
    argv = build(tmp_path)
    code, lines = _run(capsys, argv + (["--workdir", tmp_path / "runs"] if "--workdir" not in argv
                                        and argv[0] == "run" else []))
    _check_one_line(code, lines, expected, tmp_path)


# Loaders that no command reaches cheaply, called under the CLI's error handling.
def _loader_cases():
    from core import data as data_lib
    from forecasting.prednext import data as prednext_data
    from generative.deepfake_attack.train import stage_cache
    from optimization.lgbo.campaign import Campaign
    from rl_tools.counterfactuals.export import read_jsonl

    def frames(t):
        frames_root, splits = _ucf(t)
        entries = prednext_data.frame_folder_entries(frames_root, splits, subset="train")
        return prednext_data.load_frames(entries[0].frames, 8)

    def unreadable(t, monkeypatch):  # root reads every file, so permission is simulated at os.access
        path = _bytes_file(t, "locked.csv", b"date,a\n")
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p) == str(path) else real(p, mode, **kw))
        return data_lib.input_file(path, "a CSV file")

    def b2t(t, name, loader):
        from bit import data as bit_data
        return getattr(bit_data, loader)(_bytes_file(t, name, b"\x00garbage" * 10))

    return {
        "bit_mat_garbage": (lambda t: b2t(t, "t12.mat", "load_b2t24"),
                            ["{t}/t12.mat: not a readable MATLAB .mat file"]),
        "bit_mat_missing_keys": (lambda t: __import__("bit.data").data.load_b2t24(_savemat(t / "s.mat")),
                                 ["{t}/s.mat: missing keys ['sentenceText', 'tx1', 'spikePow', 'blockIdx']"]),
        "stage_cache_damaged": (lambda t: stage_cache(_bytes_file(t, "stage_attack.npz", b"PK\x03\x04 cut"), ["t_am"]),
                                ["{t}/stage_attack.npz: a damaged stage cache", "delete it to run that stage again"]),
        "stage_cache_incomplete": (lambda t: stage_cache(_npz(t / "stage_attack.npz"), ["t_fake", "t_am"]),
                                   ["{t}/stage_attack.npz: stage cache lacks ['t_am']"]),
        "frame_not_an_image": (frames, ["{t}/frames/Drama/v_a_c01/img_00001.jpg: not a readable image frame"]),
        "file_unreadable": (unreadable, ["{t}/locked.csv: not readable (permission denied); expected a CSV file"]),
        "array_rows_differ": (lambda t: data_lib.ArrayLoader({"x": np.zeros((4, 2)), "y": np.zeros(3)}, 2),
                              ["arrays: expected the same number of rows in every array, got {'x': 4, 'y': 3}"]),
        "array_batch_over_rows": (lambda t: data_lib.ArrayLoader({"x": np.zeros((4, 2))}, 8),
                                  ["batch_size=8: expected at most the 4 rows of data"]),
        "array_infinite": (lambda t: data_lib.finite_array(np.array([[1.0, np.inf]]), "features", file=t / "f.npy"),
                           ["{t}/f.npy: features: 1 NaN or infinite value(s), the first inf at index (0, 1)"]),
        "array_strings": (lambda t: data_lib.finite_array(np.array(["a"]), "features"),
                          ["features: expected numbers, got dtype <U1"]),
        "campaign_corrupt": (lambda t: Campaign.load(_bytes_file(t, "run.json", b'{"version": 1, "spa')),
                             ["campaign file {t}/run.json is corrupt (not JSON"]),
        "campaign_a_folder": (lambda t: Campaign.load(t), ["campaign file {t} is a folder"]),
        "jsonl_bad_line": (lambda t: read_jsonl(_bytes_file(t, "x.jsonl", b'{"a": 1}\n{"a": \n')),
                           ["{t}/x.jsonl:2: expected a JSON object per line"]),
        "jsonl_not_objects": (lambda t: read_jsonl(_bytes_file(t, "x.jsonl", b'[1, 2]\n')),
                              ["{t}/x.jsonl:1: a JSON list: expected a JSON object per line"]),
        "jsonl_a_folder": (lambda t: read_jsonl(t), ["{t}: is a folder; expected a JSONL file"]),
    }


def _npz(path):
    np.savez(path, t_fake=np.zeros(2))
    return path


def _savemat(path):
    from scipy.io import savemat
    savemat(path, {"other": np.zeros(3)})
    return path


LOADER_CASES = sorted(_loader_cases())


@pytest.mark.parametrize("name", LOADER_CASES)
def test_loader_bad_input_is_one_line_exit_2_naming_the_file(name, tmp_path, capsys, monkeypatch):
    func, expected = _loader_cases()[name]
    call = (lambda: func(tmp_path, monkeypatch)) if func.__code__.co_argcount == 2 else (lambda: func(tmp_path))
    code, lines = _run(capsys, func=call)
    _check_one_line(code, lines, expected, tmp_path)


def test_bo_command_bad_files(tmp_path, capsys):
    (tmp_path / "space.json").write_text("{oops")
    code, lines = _run(capsys, ["bo", "init", tmp_path / "run.json", "--space", tmp_path / "space.json"])
    _check_one_line(code, lines, ["space file {t}/space.json is not JSON"], tmp_path)
    code, lines = _run(capsys, ["bo", "init", tmp_path / "run.json", "--space", tmp_path])
    _check_one_line(code, lines, ["{t}: is a folder; expected a JSON search-space file"], tmp_path)
    code, lines = _run(capsys, ["bo", "ask", tmp_path / "none.json"])
    _check_one_line(code, lines, ["campaign file {t}/none.json does not exist"], tmp_path)


# Checkpoints: a corrupt latest one falls back to the previous one with a warning; none readable stops.
def _state(value):
    return {"w": jnp.full((3,), float(value)), "key": jax.random.key(0)}


def _two_checkpoints(folder):
    ckpt = Checkpointer(folder, keep=3)
    for step in (1, 2):
        ckpt.save(step, _state(step), data_state={"step": step})
    ckpt.close()


@pytest.mark.parametrize("damage", ["extra_garbage", "state_metadata_truncated", "manifest_truncated", "emptied"])
def test_corrupt_latest_checkpoint_falls_back_to_the_previous_with_a_warning(tmp_path, damage):
    _two_checkpoints(tmp_path)
    step2 = tmp_path / "last" / "2"
    if damage == "extra_garbage":
        (step2 / "extra" / "metadata").write_text("{garb")
    elif damage == "emptied":
        for p in sorted(step2.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
    else:
        p = step2 / "state" / ("_METADATA" if damage == "state_metadata_truncated" else "manifest.ocdbt")
        p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
    ckpt = Checkpointer(tmp_path, keep=3)
    with pytest.warns(CorruptCheckpointWarning) as record:
        assert ckpt.latest_step() == 1
    message = str(record[0].message)
    assert f"checkpoint {tmp_path}/last/2 cannot be read" in message and "resuming from the previous" in message
    assert f"moved it to {tmp_path}/corrupt" in message and "\n" not in message
    state, data_state = ckpt.restore(_state(0))
    assert data_state == {"step": 1} and float(state["w"][0]) == 1.0
    assert (tmp_path / "corrupt" / "last-2").is_dir()  # kept for inspection, out of the manager's way
    ckpt.save(2, _state(7), data_state={"step": 2})  # the resumed run writes step 2 again
    assert Checkpointer(tmp_path).restore(_state(0))[1] == {"step": 2}


def test_no_readable_checkpoint_stops_with_one_line(tmp_path, capsys):
    _two_checkpoints(tmp_path)
    for step in (1, 2):
        (tmp_path / "last" / str(step) / "extra" / "metadata").write_text("")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorruptCheckpointWarning)  # no fallback: nothing to fall back to
        code, lines = _run(capsys, func=lambda: Checkpointer(tmp_path).latest_step())
    _check_one_line(code, lines, [f"no checkpoint in {tmp_path}/last can be read (step 2:",
                                  "move the folder away to start afresh, or use a new --workdir"], tmp_path)


def test_a_checkpoint_folder_that_is_a_file(tmp_path, capsys):
    (tmp_path / "last").write_text("x")
    code, lines = _run(capsys, func=lambda: Checkpointer(tmp_path))
    _check_one_line(code, lines, [f"{tmp_path}/last: expected a checkpoint folder, found a file"], tmp_path)


def test_a_run_resumes_past_a_corrupt_latest_checkpoint_through_the_cli(tmp_path, capsys):
    argv = REG + ["--set", "steps=4", "--set", "ckpt_every=2", "--set", "log_every=2", "--workdir", tmp_path]
    assert cli.main([str(a) for a in argv]) == 0
    capsys.readouterr()
    (tmp_path / "checkpoints" / "last" / "4" / "extra" / "metadata").write_text("{")
    with pytest.warns(CorruptCheckpointWarning, match="resuming from the previous checkpoint, step 2"):
        assert cli.main([str(a) for a in argv]) == 0
    capsys.readouterr()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r][-1] == 4  # steps 3-4 were run again from step 2
    (tmp_path / "checkpoints" / "last" / "4" / "extra" / "metadata").write_text("{")
    (tmp_path / "checkpoints" / "last" / "2" / "extra" / "metadata").write_text("{")
    code, lines = _run(capsys, argv)
    _check_one_line(code, lines, [f"no checkpoint in {tmp_path}/checkpoints/last can be read"], tmp_path)


def test_any_other_exception_keeps_its_traceback():
    def bug():
        raise KeyError("a bug, not bad input")
    with pytest.raises(KeyError):
        cli.guarded(bug)


def test_the_suite_has_at_least_40_cases():
    assert len(CLI_CASES) + len(LOADER_CASES) + 3 + 4 + 3 >= 40


def print_table() -> None:
    """Every CLI and loader case with its exit status and message, as a Markdown table ($T: the case's folder)."""
    import contextlib
    import io
    import tempfile

    class Patch:  # a stand-in for pytest's monkeypatch, undone after each case
        def __init__(self):
            self.undo = []

        def setattr(self, obj, name, value):
            self.undo.append((obj, name, getattr(obj, name)))
            setattr(obj, name, value)

    print("| case | exit | message |\n|---|---|---|")
    cases = [(n, "cli", CLI_CASES[n][0]) for n in sorted(CLI_CASES)]
    cases += [(n, "loader", f) for n, (f, _) in sorted(_loader_cases().items())]
    for name, kind, build in cases:
        folder, patch, err = tempfile.mkdtemp(prefix="bad-input-"), Patch(), io.StringIO()
        t = __import__("pathlib").Path(folder)
        with contextlib.redirect_stderr(err):
            if kind == "cli":
                argv = [str(a) for a in build(t)]
                argv += ["--workdir", str(t / "runs")] if argv[0] == "run" and "--workdir" not in argv else []
                code = cli.main(argv)
            else:
                code = cli.guarded((lambda: build(t, patch)) if build.__code__.co_argcount == 2 else (lambda: build(t)))
        for obj, attr, value in reversed(patch.undo):
            setattr(obj, attr, value)
        message = err.getvalue().strip().replace(folder, "$T").removeprefix("iclr26: error: ")
        print(f"| {name} | {code} | `{message}` |")


if __name__ == "__main__":
    print_table()
