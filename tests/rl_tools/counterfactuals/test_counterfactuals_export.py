"""JSONL export schema, no latent leakage in counterfactual records, the datasheet command."""

import argparse
import json

from rl_tools.counterfactuals import cli, export, generate

FIELDS = {"id", "item_id", "config", "split", "variant", "domain", "template_id", "difficulty", "code", "story",
          "latents", "x_factual", "y_factual", "x_intervened", "revealed_latents", "question", "answer",
          "consistent_latents", "prior_answer", "released_config"}


def test_jsonl_schema_and_round_trip(tmp_path):
    items, _ = generate.generate_all({"if_else": 20, "multi_r": 10, "math": 10}, seed=3)
    path = tmp_path / "all.jsonl"
    n = export.write_jsonl([it for its in items.values() for it in its], path)
    rows = export.read_jsonl(path)
    assert n == len(rows) == 40 * 3
    for row in rows:
        assert set(row) == FIELDS
        released = export.RELEASED_CONFIGS.get((row["split"], row["variant"]))
        assert row["released_config"] == released
        assert row["config"] == (released or f"{row['domain']}-{row['split']}-{row['variant']}")
        assert row["answer"] == sorted(set(row["answer"]))
        if row["variant"] == "counterfactual":
            assert row["revealed_latents"] is None
            assert " = " not in row["question"].split("```")[-1]  # no "r = 5" outside the code block
            assert row["answer"] != row["prior_answer"]
        else:
            assert row["revealed_latents"] and len(row["answer"]) == 1
    ex = next(r for r in rows if r["split"] == "math")
    assert ex["domain"] == "math" and ex["story"] in ex["question"]


def test_datasheet_and_export_commands(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["cf", "datasheet", "--n", "30", "--n-train", "50"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    for split in generate.SPLITS:
        assert split in out
    assert "filtered_abduction_irrelevant" in out
    args = parser.parse_args(["cf", "export", str(tmp_path), "--n", "5", "--n-train", "5"])
    assert args.func(args) == 0
    assert (tmp_path / "code-while-counterfactual.jsonl").exists()
    assert (tmp_path / "math-gsm-interventional.jsonl").exists()
    assert (tmp_path / "code-if_else-counterfactual-train.jsonl").exists()
    assert (tmp_path / "code-if_else-interventional.jsonl").exists()  # ours: no released counterpart
    manifest = {m["config"]: m for m in json.loads((tmp_path / "configs.json").read_text())}
    released = {"code-if_else-counterfactual", "code-if_else_long-counterfactual", "code-multi_r-counterfactual",
                "code-while-counterfactual", "code-multi_r-interventional", "code-while-interventional",
                "math-gsm-counterfactual", "math-gsm-interventional", "code-if_else-counterfactual-train"}
    assert {c for c, m in manifest.items() if m["released_config"]} == released  # the dataset card's names
    assert manifest["code-if_else-interventional"]["released_config"] is None
    sheet = json.loads((tmp_path / "datasheet.json").read_text())
    assert {r["split"] for r in sheet} == set(generate.SPLITS)
