"""Render README tables from `benchmarks/results/*.json`, so every number in a README comes from a run.

Between `<!-- results:NAME -->` and `<!-- /results:NAME -->` in README.md (and in any `*/README.md` that
carries the same markers) goes the table rendered from `benchmarks/results/NAME.json`; `<!-- claims -->`
... `<!-- /claims -->` in the top-level README gets every benchmark's claims. A benchmark that renders a
method-specific table from its own JSON writes it between `<!-- table:NAME -->` markers instead, which this
script leaves alone (its claims still reach the top-level README). Usage:

    python benchmarks/render.py            # rewrite the READMEs in place
    python benchmarks/render.py --check    # exit 1 if a README is out of date with the JSON files, or a
                                           # results file has a claim without n and interval

`<!-- methods -->`, `<!-- status -->` and `<!-- own-data -->` in the top-level README get the method table, the
one-line status summary and the "your own data" list, from `benchmarks/methods.toml` and the claim counts of
each method's results files.

A claim's result is **held**, **not held** or **inconclusive** (`held: null`: n < 2 or an interval spanning the
null); a sanity check (`kind: "check"`) is shown as such and not counted among the claims.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import tomllib
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.results import claim_problems  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
METHODS = ROOT / "benchmarks" / "methods.toml"
STATUSES = ("complete", "partial", "not started")
MAX_ROWS = 40
MAX_SCALE_CHARS = 240


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, dict)):
        return "…"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def result_text(c: dict) -> str:
    if c.get("kind") == "check":
        return {True: "check: passed", False: "**check failed**", None: "check: not run"}[c["held"]]
    return {True: "**held**", False: "**not held**", None: "**inconclusive**"}[c["held"]]


def _stats_text(c: dict) -> str:
    if c.get("kind") == "check" or "n" not in c:
        return ""
    interval = c.get("interval") or [None, None]
    bounds = ", ".join("–" if v is None else _fmt(float(v)) for v in interval)
    effect = f"{_fmt(float(c['effect']))} " if isinstance(c.get("effect"), (int, float)) else ""
    return f"{effect}[{bounds}]"


def claims_table(name: str, record: dict) -> str:
    claims = record.get("claims", [])
    baselines = any("chance" in c or "oracle" in c for c in claims)
    header = ["claim", "statement", "result", "n", "effect [interval]"]
    header += ["chance / oracle"] if baselines else []
    rows = []
    for c in claims:
        row = [c["id"], c["statement"], result_text(c), c.get("n", ""), _stats_text(c)]
        if baselines:
            row.append(" / ".join("–" if c.get(k) is None else _fmt(float(c[k])) for k in ("chance", "oracle")))
        rows.append(row + [c["evidence"]])
    return markdown_table(header + ["evidence"], rows)


def claim_counts(record: dict) -> str:
    claims = [c for c in record.get("claims", []) if c.get("kind") != "check"]
    checks = len(record.get("claims", [])) - len(claims)
    held = sum(c["held"] is True for c in claims)
    inconclusive = sum(c["held"] is None for c in claims)
    text = f"{held}/{len(claims)} held" if claims else "no claims"
    text += f", {inconclusive} inconclusive" if inconclusive else ""
    text += f"; {checks} sanity check{'s' * (checks != 1)}" if checks else ""
    return text


def rows_table(record: dict) -> str:
    rows = record.get("rows", [])
    if not rows:
        return "_no rows_"
    header: list[str] = []
    for row in rows:
        header += [k for k, v in row.items() if k not in header and not isinstance(v, (list, dict))]
    body = [[row.get(k, "") for k in header] for row in rows[:MAX_ROWS]]
    more = f"\n\n_{len(rows) - MAX_ROWS} more rows in the JSON file._" if len(rows) > MAX_ROWS else ""
    return markdown_table(header, body) + more


def provenance(name: str, record: dict) -> str:
    scale = record.get("scale")
    scale_text = ""
    if scale:
        text = json.dumps(scale) if isinstance(scale, (dict, list)) else str(scale)
        if len(text) > MAX_SCALE_CHARS:
            text = text[:MAX_SCALE_CHARS].rstrip() + " … (the rest in the JSON)"
        scale_text = f" Scale: {text}."
    return (f"_From `benchmarks/results/{name}.json`: `{record.get('command', '?')}` at commit "
            f"`{str(record.get('git_commit', '?'))[:12]}`, {record.get('wall_seconds', '?')} s wall.{scale_text}_")


def section(name: str, record: dict) -> str:
    """Provenance, the rows (or the record's `summary` rows when it has a list of them: e.g. means over seeds,
    with the per-run rows left in the JSON) and the claims."""
    summary = record.get("summary")
    if isinstance(summary, list) and summary and all(isinstance(r, dict) for r in summary):
        table = rows_table({"rows": summary}) + "\n\n_Per-run rows are in the JSON file._"
    else:
        table = rows_table(record)
    parts = [provenance(name, record), "", table]
    if record.get("claims"):
        parts += ["", claims_table(name, record)]
    return "\n".join(parts)


def load_methods(path: pathlib.Path | None = None) -> list[dict]:
    methods = tomllib.loads((path or METHODS).read_text())["method"]
    for m in methods:
        if m["status"] not in STATUSES:
            raise ValueError(f"methods.toml, method {m['number']}: status={m['status']!r}: expected one of {STATUSES}")
        if m["status"] == "partial" and not m["missing"]:
            raise ValueError(f"methods.toml, method {m['number']}: a partial method says what is missing")
    return methods


def method_claims(method: dict, records: dict[str, dict]) -> str:
    names = [n for n in method["results"] if n in records and records[n].get("claims")]
    if not names:
        return "–"
    merged = {"claims": [c for n in names for c in records[n]["claims"]]}
    return claim_counts(merged)


def methods_table(methods: list[dict], records: dict[str, dict]) -> str:
    rows = []
    for m in methods:
        notes = "; ".join(x for x in (m["scaled"], f"missing: {m['missing']}" if m["missing"] else "") if x)
        rows.append([m["number"], m["paper"], f"`{m['home']}`", m["status"], method_claims(m, records), notes])
    return markdown_table(["#", "paper", "home", "status", "claims", "scaled down or unknown; missing"], rows)


def status_summary(methods: list[dict]) -> str:
    counts = {s: sum(m["status"] == s for m in methods) for s in STATUSES}
    return (f"Of the {len(methods)} methods, **{counts['complete']}** are complete, **{counts['partial']}** partial "
            f"(they run and are tested; the table says what each lacks) and **{counts['not started']}** not "
            "started.")


def own_data_list(methods: list[dict]) -> str:
    return "\n".join(f"- {m['paper']} (`{m['home']}`): {m['data']}" for m in methods if m["data"])


def render_methods(text: str, methods: list[dict], records: dict[str, dict]) -> str:
    for marker, body in (("methods", lambda: methods_table(methods, records)),
                         ("status", lambda: status_summary(methods)), ("own-data", lambda: own_data_list(methods))):
        text = re.sub(rf"<!-- {marker} -->.*?<!-- /{marker} -->",
                      lambda _: f"<!-- {marker} -->\n{body()}\n<!-- /{marker} -->", text, flags=re.S)
    return text


def load_all() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))}


def render_text(text: str, records: dict[str, dict]) -> str:
    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name not in records:
            body = f"_`benchmarks/results/{name}.json` has not been produced yet._"
        else:
            body = section(name, records[name])
        return f"<!-- results:{name} -->\n{body}\n<!-- /results:{name} -->"

    text = re.sub(r"<!-- results:([\w.-]+) -->.*?<!-- /results:\1 -->", replace, text, flags=re.S)

    def claims(_: re.Match) -> str:
        blocks = []
        for name, record in records.items():
            if record.get("claims"):
                blocks.append(f"**{name}** ({claim_counts(record)}; {provenance(name, record)})\n\n"
                              + claims_table(name, record))
        return "<!-- claims -->\n" + ("\n\n".join(blocks) or "_no benchmark has run yet_") + "\n<!-- /claims -->"

    text = re.sub(r"<!-- claims -->.*?<!-- /claims -->", claims, text, flags=re.S)
    if "<!-- methods -->" in text or "<!-- status -->" in text or "<!-- own-data -->" in text:
        text = render_methods(text, load_methods(), records)
    return text


def readmes() -> list[pathlib.Path]:
    skip = {".venv", "runs", "node_modules", "build", "dist"}
    return [p for p in sorted(ROOT.rglob("README.md")) if not skip & set(p.relative_to(ROOT).parts)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the READMEs are up to date")
    args = parser.parse_args(argv)
    records = load_all()
    bad = [f"{name}.json claim {c.get('id')!r}: {'; '.join(claim_problems(c))}"
           for name, record in records.items() for c in record.get("claims", []) if claim_problems(c)]
    for line in bad:
        print(f"results format: {line}", file=sys.stderr)
    stale = []
    for path in readmes():
        text = path.read_text()
        new = render_text(text, records)
        if new != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(new)
    verb = "out of date" if args.check else "rendered"
    print(f"{verb}: {', '.join(map(str, stale)) or 'none'}")
    return 1 if args.check and (stale or bad) else 0


if __name__ == "__main__":
    sys.exit(main())
