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


def _write_images(folder, images):
    from PIL import Image

    folder.mkdir(parents=True)
    for i, im in enumerate(images):
        Image.fromarray((im[..., 0] * 255).astype(np.uint8)).save(folder / f"{i:03d}.png")


def test_user_generator_samples_replace_the_zoo(tmp_path):
    """`data.fakes_folder`: one subfolder of samples per generator of the user's own; the attribution classes,
    ASR cells, spectral distances and plots follow the folder names, and a bad folder is one line."""
    import dataclasses

    from core.config import BadInputError
    from generative.deepfake_attack import configs
    from generative.deepfake_attack.data import load_digits_images, load_fake_folders

    x, _ = load_digits_images(16)
    rng = np.random.default_rng(0)
    fakes = tmp_path / "fakes"
    for name, shift in (("ganA", 0.25), ("ganB", -0.25)):  # two "generators": brighter and darker digits
        _write_images(fakes / name, np.clip(x[rng.permutation(len(x))[:40]] + shift, 0, 1))
    split = load_fake_folders(str(fakes), 16, 24, 12, 0)
    assert list(split) == ["ganA", "ganB"] and split["ganA"][0].shape == (24, 16, 16, 1)
    assert split["ganA"][1].shape == (12, 16, 16, 1)
    with pytest.raises(BadInputError, match=r"ganA holds 40 images; expected at least .* = 41"):
        load_fake_folders(str(fakes), 16, 30, 11, 0)
    with pytest.raises(BadInputError, match="data.fakes_folder='.*nowhere': expected a directory"):
        load_fake_folders(str(tmp_path / "nowhere"), 16, 1, 1, 0)
    (tmp_path / "empty" / "ganC").mkdir(parents=True)
    with pytest.raises(BadInputError, match=r"data.fakes_folder: '.*ganC': no images"):
        load_fake_folders(str(tmp_path / "empty"), 16, 1, 1, 0)

    tiny = configs.tiny()
    cfg = dataclasses.replace(
        tiny, data=dataclasses.replace(tiny.data, fakes_folder=str(fakes), n_am=24, n_eval=12),
        attack=dataclasses.replace(tiny.attack, readings=("additive",), kinds=("blackbox",)),
        defence=dataclasses.replace(tiny.defence, defences=("none",)))
    exp = get("deepfake_attack")
    exp.run(cfg, tmp_path / "run")
    record = json.loads((tmp_path / "run" / "record.json").read_text())
    assert list(record["generators"]) == ["ganA", "ganB"]
    assert set(record["spectral_distance"]["clean"]) == {"ganA", "ganB"}
    cells = record["asr"]["none"]["blackbox_additive"]["cells"]
    assert set(cells) == {f"{a}/{g}" for a in configs.ATTRIBUTORS for g in ("ganA", "ganB")}
    assert (tmp_path / "run" / "samples_ganB.png").exists()
    assert not (tmp_path / "run" / "stage_generators.npz").exists()  # nothing to resume: the samples are on disk
