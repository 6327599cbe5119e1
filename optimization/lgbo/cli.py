"""`iclr26 bo init/ask/tell/status`: a lab user's ask/tell loop over a campaign JSON file.

    iclr26 bo init run.json --space space.json [--pool pool.csv] [--n-init 4]
                   [--llm-url http://127.0.0.1:8000/v1 --llm-model m]
    iclr26 bo ask run.json -n 3 [--preference "[region, [[...], [...]], 0.8]"]
    iclr26 bo tell run.json --x '{"temp": 80, "solvent": "water"}' --y 0.71      (or --csv results.csv)
    iclr26 bo status run.json [--plot best.png]
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import sys

from core.config import BadInputError
from core.data import input_file
from optimization.lgbo.campaign import Campaign
from optimization.lgbo.space import Space


def _read_rows(path: pathlib.Path) -> list[dict[str, str]]:
    input_file(path, "a CSV file with a header row")
    try:
        with open(path, newline="") as fh:
            return list(csv.DictReader(fh))
    except (UnicodeDecodeError, csv.Error) as e:
        raise BadInputError(f"{path}: not a readable CSV ({type(e).__name__}: {e})") from None


def cmd_init(args: argparse.Namespace) -> int:
    space_file = input_file(args.space, "a JSON search-space file")
    try:
        space = Space.from_json(json.loads(space_file.read_text()))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadInputError(f"space file {args.space} is not JSON: {e}") from None
    pool = None
    if args.pool:
        pool = [[r[n] for n in space.names] for r in _read_rows(pathlib.Path(args.pool))]
    oracle = {"kind": "none"}
    if args.llm_url:
        if not args.llm_model:
            raise BadInputError("--llm-url needs --llm-model (the model name the server expects)")
        oracle = {"kind": "openai", "base_url": args.llm_url, "model": args.llm_model,
                  "temperature": args.llm_temperature, "context": args.context or ""}
    c = Campaign.create(args.campaign, space, oracle=oracle, pool=pool, overwrite=args.overwrite,
                        n_init=args.n_init, seed=args.seed, goal=args.goal, gp=args.gp)
    print(f"created {c.path}: {space.n_params} parameters, oracle {oracle['kind']}"
          + (f", pool of {len(pool)} rows" if pool else ""))
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    c = Campaign.load(args.campaign)
    sugg = c.ask(args.n, preference=args.preference, reuse_pending=not args.fresh)
    info = c.pending or {}
    if info.get("llm") and info["llm"].get("error"):
        print(f"note: {info['llm']['error']}", file=sys.stderr)
    print(json.dumps(sugg, indent=1))
    return 0


def cmd_tell(args: argparse.Namespace) -> int:
    c = Campaign.load(args.campaign)
    if args.csv:
        rows = _read_rows(pathlib.Path(args.csv))
        if rows and args.y_column not in rows[0]:
            raise BadInputError(f"{args.csv} has no column {args.y_column!r} (columns: {list(rows[0])})")
        xs = [{n: r[n] for n in c.space.names} for r in rows]
        ys = [r[args.y_column] for r in rows]
    else:
        if args.x is None or args.y is None:
            raise BadInputError("tell needs --x JSON --y VALUE, or --csv FILE")
        try:
            x = json.loads(args.x)
        except json.JSONDecodeError as e:
            raise BadInputError(f"--x {args.x!r} is not JSON: {e}") from None
        xs, ys = [x], [args.y]
    c.tell(xs, ys)
    print(f"{len(xs)} observation(s) added; {len(c.observations)} in total; best {c.best()}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    c = Campaign.load(args.campaign)
    print(json.dumps(c.status(), indent=1))
    if args.plot:
        print(f"wrote {c.plot(args.plot)}")
    return 0


def _wrap(fn):
    def run(args):
        try:
            return fn(args)
        except ValueError as e:  # includes CampaignFileError and parse errors: one clear line, exit 2
            print(f"iclr26: error: {' '.join(str(e).split())}", file=sys.stderr)
            return 2
    return run


def register(subparsers) -> None:
    """Add `bo` with its subcommands to the iclr26 CLI (entry point group iclr26.commands)."""
    bo = subparsers.add_parser("bo", help="ask/tell Bayesian optimisation (LGBO) for lab campaigns")
    sub = bo.add_subparsers(dest="bo_command", required=True)

    p = sub.add_parser("init", help="create a campaign file")
    p.add_argument("campaign")
    p.add_argument("--space", required=True,
                   help="JSON list of parameters (continuous: low/high; categorical: options)")
    p.add_argument("--pool", help="CSV of candidate rows (columns named as the parameters): pool mode")
    p.add_argument("--n-init", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--goal", choices=("maximize", "minimize"), default="maximize")
    p.add_argument("--gp", choices=("map", "nuts"), default="map")
    p.add_argument("--llm-url", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--llm-model")
    p.add_argument("--llm-temperature", type=float, default=0.2)
    p.add_argument("--context", help="a description of the experiment for the LLM prompt")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=_wrap(cmd_init))

    p = sub.add_parser("ask", help="suggest the next experiments")
    p.add_argument("campaign")
    p.add_argument("-n", type=int, default=1)
    p.add_argument("--preference", help="your own preference in the LLM answer format, e.g. "
                                        "\"[region, [[lb...], [ub...]], 0.8]\"")
    p.add_argument("--fresh", action="store_true", help="recompute even if suggestions are pending")
    p.set_defaults(func=_wrap(cmd_ask))

    p = sub.add_parser("tell", help="record measured results")
    p.add_argument("campaign")
    p.add_argument("--x", help="JSON object {name: value} or list in parameter order")
    p.add_argument("--y", help="the measured objective")
    p.add_argument("--csv", help="CSV with one column per parameter and a y column")
    p.add_argument("--y-column", default="y")
    p.set_defaults(func=_wrap(cmd_tell))

    p = sub.add_parser("status", help="show observations, best, pending suggestions")
    p.add_argument("campaign")
    p.add_argument("--plot", help="write a best-so-far PNG here")
    p.set_defaults(func=_wrap(cmd_status))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="lgbo")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
