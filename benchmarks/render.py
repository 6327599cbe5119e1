"""Render README tables from `benchmarks/results/*.json`, so every number in a README comes from a run.

Between `<!-- results:NAME -->` and `<!-- /results:NAME -->` in README.md (and in any `*/README.md` that
carries the same markers) goes the table rendered from `benchmarks/results/NAME.json`; `<!-- claims -->`
... `<!-- /claims -->` in the top-level README gets every benchmark's claims. A benchmark that renders a
method-specific table from its own JSON writes it between `<!-- table:NAME -->` markers instead, which this
script leaves alone (its claims still reach the top-level README). Usage:

    python benchmarks/render.py            # rewrite the READMEs in place
    python benchmarks/render.py --check    # exit 1 if a README is out of date with the JSON files
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
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


def claims_table(name: str, record: dict) -> str:
    rows = [[c["id"], c["statement"], "**held**" if c["held"] else "**not held**", c["evidence"]]
            for c in record.get("claims", [])]
    return markdown_table(["claim", "statement", "result", "evidence"], rows)


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
    parts = [provenance(name, record), "", rows_table(record)]
    if record.get("claims"):
        parts += ["", claims_table(name, record)]
    return "\n".join(parts)


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
                held = sum(c["held"] for c in record["claims"])
                blocks.append(f"**{name}** ({held}/{len(record['claims'])} held; {provenance(name, record)})\n\n"
                              + claims_table(name, record))
        return "<!-- claims -->\n" + ("\n\n".join(blocks) or "_no benchmark has run yet_") + "\n<!-- /claims -->"

    return re.sub(r"<!-- claims -->.*?<!-- /claims -->", claims, text, flags=re.S)


def readmes() -> list[pathlib.Path]:
    skip = {".venv", "runs", "node_modules"}
    return [p for p in sorted(ROOT.rglob("README.md")) if not skip & set(p.relative_to(ROOT).parts)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the READMEs are up to date")
    args = parser.parse_args(argv)
    records = load_all()
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
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
