"""DeepFake attribution on MNIST: additive vs multiplicative trace-removal attacks, with and without defences
(paper 9's central claim, our reconstruction of the attack).

    nice -n 10 .venv/bin/python benchmarks/deepfake_attack.py                    # preset bench
    nice -n 10 .venv/bin/python benchmarks/deepfake_attack.py --preset demo --set gen.gan_steps=600

One run of the whole pipeline (6 generators, 4 attribution models, the two attacks at matched PSNR, PGD /
blur / DCT references, 5 defences). Writes benchmarks/results/deepfake_attack.json, the figures
benchmarks/results/deepfake_attack_*.png and the README table between the table markers.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import sys
import tempfile
import time

import jax  # noqa: E402
import numpy as np  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.config import apply_overrides, to_dict  # noqa: E402
from core.results import RESULTS_DIR, claim, write_results  # noqa: E402
from generative.deepfake_attack import configs  # noqa: E402
from generative.deepfake_attack.train import train_and_evaluate  # noqa: E402

README = ROOT / "generative" / "deepfake_attack" / "README.md"
NAME = "deepfake_attack"
PAPER = {"asr_no_defence": 0.9708, "asr_defended_min": 0.7239}


def pct(v: float) -> str:
    return "n/a" if v != v else f"{100 * v:.1f}"


def tables(rec: dict, cfg) -> str:
    t = rec["table"]
    defences = list(t)
    attacks = ["additive", "multiplicative", "pgd", "blur", "dct"]
    out = [f"ASR % (attributed-as-real %) over correctly attributed fakes, mean of 4 attribution models x 6 "
           f"generators; additive and multiplicative at matched PSNR {cfg.attack.target_psnr} dB; PGD is "
           f"white-box per model (L2 ball of the same PSNR) on {min(cfg.attack.pgd_per_gm, cfg.data.n_eval)} "
           "fakes per generator.", "",
           "| attack \\ defence | " + " | ".join(defences) + " |", "|---|" + "---|" * len(defences)]
    for a in attacks:
        out.append(f"| {a} | " + " | ".join(f"{pct(t[d][a]['asr'])} ({pct(t[d][a]['to_real'])})" for d in defences) + " |")
    out.append("| min clean acc % | " + " | ".join(
        pct(min(rec["attributors"][d]["clean_acc"].values())) for d in defences) + " |")
    out += ["", "Fidelity of the attacked fakes (mean over images; stroke = the digit's pixels dilated by 1):", "",
            "| attack | PSNR dB | PSNR stroke | SSIM | SSIM stroke | scale |", "|---|---|---|---|---|---|"]
    for a, f in rec["fidelity"].items():
        s = rec["scales"].get(a)
        out.append(f"| {a} | {f['psnr']:.2f} | {f['psnr_stroke']:.2f} | {f['ssim']:.3f} | {f['ssim_stroke']:.3f} | "
                   f"{'' if s is None else f'{s:.3f}'} |")
    out += ["", "Clean attribution accuracy % (7 classes: real + 6 generators), per defence:", "",
            "| model | " + " | ".join(defences) + " |", "|---|" + "---|" * len(defences)]
    for m in rec["attributors"]["none"]["clean_acc"]:
        out.append(f"| {m} | " + " | ".join(pct(rec["attributors"][d]["clean_acc"][m]) for d in defences) + " |")
    out += ["", f"Generators (FID on the project's digit classifier features; real-vs-real FID "
            f"{rec['fid_real_vs_real']:.2f}; classifier accuracy {pct(rec['digit_classifier_acc'])} %):", "",
            "| generator | FID |", "|---|---|"]
    out += [f"| {g} | {info['fid']:.2f} |" for g, info in rec["generators"].items()]
    return "\n".join(out)


def write_table(text: str) -> None:
    src = README.read_text()
    start, end = f"<!-- table:{NAME} -->", f"<!-- /table:{NAME} -->"
    if start not in src or end not in src:
        raise ValueError(f"{README}: expected the markers {start} ... {end}")
    head, rest = src.split(start, 1)
    _, tail = rest.split(end, 1)
    README.write_text(f"{head}{start}\n{text}\n{end}{tail}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="bench", choices=sorted(configs.PRESETS))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--compile-cache", default=None, help="persistent XLA compilation cache folder (resumed runs)")
    args = ap.parse_args(argv)
    if args.compile_cache:
        jax.config.update("jax_compilation_cache_dir", args.compile_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    cfg = apply_overrides(configs.PRESETS[args.preset], args.set)
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="deepfake_attack_"))
    t0 = time.time()
    rec = train_and_evaluate(cfg, workdir)
    wall = time.time() - t0
    t = rec["table"]
    defended = [d for d in t if d != "none"]
    rows = [{"defence": d, "attack": a, "asr": t[d][a]["asr"], "to_real": t[d][a]["to_real"], "cells": t[d][a]["cells"]}
            for d in t for a in t[d]]
    min_acc = {d: min(rec["attributors"][d]["clean_acc"].values()) for d in t}
    add0, mul0 = t["none"]["additive"]["asr"], t["none"]["multiplicative"]["asr"]
    add_def = float(np.mean([t[d]["additive"]["asr"] for d in defended])) if defended else float("nan")
    mul_def = float(np.mean([t[d]["multiplicative"]["asr"] for d in defended])) if defended else float("nan")
    psnr = {a: rec["fidelity"][a]["psnr"] for a in ("additive", "multiplicative")}
    claims = [
        claim("clean_attribution", "every attribution model attributes clean images with accuracy above 95%",
              min_acc["none"] > 0.95, f"lowest clean accuracy {pct(min_acc['none'])} % (no defence); "
              + ", ".join(f"{d}: {pct(v)} %" for d, v in min_acc.items() if d != "none")),
        claim("mult_vs_add_undefended", "at matched PSNR the multiplicative attack has a higher ASR than the additive one",
              mul0 > add0, f"ASR {pct(mul0)} % vs {pct(add0)} % at PSNR {psnr['multiplicative']:.2f} / {psnr['additive']:.2f} dB"),
        claim("mult_keeps_asr_under_defences",
              "the multiplicative attack keeps a high ASR under defences while the additive one at the same budget drops "
              "(mean defended ASR higher and smaller drop from the undefended ASR)",
              bool(defended) and mul_def > add_def and (mul0 - mul_def) < (add0 - add_def),
              f"mean over {len(defended)} defences: multiplicative {pct(mul0)} -> {pct(mul_def)} %, "
              f"additive {pct(add0)} -> {pct(add_def)} %"),
        claim("paper_asr_levels", "the multiplicative attack reaches the paper's levels (97.08 % undefended, > 72.39 % "
              "with every defence)", mul0 >= PAPER["asr_no_defence"] and all(
                  t[d]["multiplicative"]["asr"] > PAPER["asr_defended_min"] for d in defended),
              f"undefended {pct(mul0)} %, defended min "
              f"{pct(min([t[d]['multiplicative']['asr'] for d in defended] or [float('nan')]))} %"),
    ]
    for name in ("samples_and_spectra", "asr_by_defence"):
        shutil.copy(workdir / f"{name}.png", RESULTS_DIR / f"{NAME}_{name}.png")
    shutil.copy(workdir / "samples_dcgan_transposed.png", RESULTS_DIR / f"{NAME}_samples_dcgan_transposed.png")
    scale = (f"preset {args.preset} {' '.join(args.set)}: MNIST {cfg.data.image_size}px, pools gm/am/attack/eval "
             f"{cfg.data.n_gm}/{cfg.data.n_am}/{cfg.data.n_attack}/{cfg.data.n_eval}, GAN {cfg.gen.gan_steps} steps, "
             f"AM {cfg.am.steps} steps, attack {cfg.attack.steps} steps; paper: 12 GMs x 6 AMs on faces")
    path = write_results(NAME, rows=rows, claims=claims, wall_seconds=wall, scale=scale, config=to_dict(cfg),
                         paper=PAPER, generators=rec["generators"], attributors=rec["attributors"],
                         fidelity=rec["fidelity"], scales=rec["scales"], timings=rec["timings"],
                         fid_real_vs_real=rec["fid_real_vs_real"], digit_classifier_acc=rec["digit_classifier_acc"],
                         attack_history=rec["attack_history"], xla_flags=os.environ.get("XLA_FLAGS", ""),
                         cells={d: {a: rec["asr"][d][a]["cells"] for a in rec["asr"][d]} for d in rec["asr"]})
    write_table(tables(rec, cfg))
    print(path)
    for c in claims:
        print(("HELD     " if c["held"] else "NOT HELD ") + c["id"] + ": " + c["evidence"])


if __name__ == "__main__":
    main()
