"""The whole pipeline on the `tiny` preset through the registered experiment (slow: ~20 XLA programs compile;
minutes on 2 CPU cores, so it is deselected by default; run with `-m slow`)."""

import json

import numpy as np
import pytest

from core.registry import get


@pytest.mark.slow
def test_tiny_preset_runs_end_to_end_and_resumes(tmp_path):
    exp = get("deepfake_attack")
    metrics = exp.run(exp.config("tiny"), tmp_path)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved.keys() == metrics.keys()
    asr = [v for k, v in saved.items() if k.startswith("asr/")]
    # 6 defences x (3 readings x {pgd, universal, blackbox} + blur + dct)
    assert len(asr) == 6 * 11 and all(np.isnan(v) or 0.0 <= v <= 1.0 for v in asr)
    for name in ("samples_and_spectra.png", "asr_by_defence.png", "samples_ddpm.png", "stage_generators.npz",
                 "mean_spectra.png", "attack_training.png", "record.json"):
        assert (tmp_path / name).exists(), name
    record = json.loads((tmp_path / "record.json").read_text())
    assert set(record["generators"]) == {"dcgan_transposed", "dcgan_nearest", "dcgan_bilinear", "vae", "made", "ddpm"}
    for kind in ("universal", "blackbox"):  # every image on the budget (8-bit rounding and clipping aside)
        for reading in ("additive", "pixel_gain", "spectral_gain"):
            assert 27.0 < record["fidelity"][f"{kind}_{reading}"]["psnr"] < 30.0, (kind, reading)
    assert set(record["spectral_distance"]["clean"]) == set(record["generators"])
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert {r["curve"] for r in lines} >= {"blackbox_surrogate_ce", "blackbox_fool_spectral_gain",
                                           "universal_fool_additive"}
    # a rerun in the same folder resumes after the generator zoo
    again = exp.run(exp.config("tiny"), tmp_path)
    assert again.keys() == metrics.keys()
