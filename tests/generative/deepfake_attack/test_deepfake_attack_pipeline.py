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
    assert len(asr) == 6 * 5 and all(np.isnan(v) or 0.0 <= v <= 1.0 for v in asr)
    for name in ("samples_and_spectra.png", "asr_by_defence.png", "samples_ddpm.png", "stage_generators.npz",
                 "stage_attack.npz", "record.json"):
        assert (tmp_path / name).exists(), name
    record = json.loads((tmp_path / "record.json").read_text())
    assert set(record["generators"]) == {"dcgan_transposed", "dcgan_nearest", "dcgan_bilinear", "vae", "made", "ddpm"}
    assert abs(record["fidelity"]["additive"]["psnr"] - 28.0) < 0.5  # matched budget (8-bit rounding aside)
    assert abs(record["fidelity"]["multiplicative"]["psnr"] - 28.0) < 0.5
