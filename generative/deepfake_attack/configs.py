"""Configs for the DeepFake-attribution attack benchmark: frozen keyword-only dataclasses and presets.

Presets:
- `tiny`: scikit-learn's 8x8 digits resized to 16x16, a few dozen steps per model (tests; seconds).
- `demo`: MNIST 28x28, every stage briefly, one defence, under 3 min (`iclr26 run deepfake_attack --preset demo`).
- `bench`: the committed benchmark (`benchmarks/deepfake_attack.py`): MNIST 28x28, 6 generators, 4
  attribution models, 5 defences, within 60 min on 2 CPU cores.
- `paper`: `bench` with longer training (more steps for every model); the paper's own grid (12 generators,
  6 attribution models, face images) needs face data and GPUs that this project does not ship.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from core.config import check

GENERATORS = ("dcgan_transposed", "dcgan_nearest", "dcgan_bilinear", "vae", "made", "ddpm")
ATTRIBUTORS = ("pixel_cnn", "residual_cnn", "spectrum_mlp", "dct_mlp")
DEFENCES = ("none", "retrain", "blur", "dct", "dae", "specnorm")
ATTACKS = ("additive", "multiplicative", "pgd", "blur", "dct")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Disjoint pools of real digits: generator training, attribution training, attack training, evaluation."""

    source: Literal["mnist", "digits"] = "mnist"
    image_size: int = 28  # 28 for MNIST; digits are resized from 8x8 to this size (16 in tests)
    n_gm: int = 4000  # real images the generators learn from
    n_am: int = 2000  # real class of the attribution training set; also fakes per generator
    n_attack: int = 2000  # real images the attack is trained on (it never sees a fake)
    n_eval: int = 1000  # real evaluation images; also evaluation fakes per generator
    seed: int = 0

    def __post_init__(self):
        check(self.source in ("mnist", "digits"), "data.source", self.source, "'mnist' or 'digits'")
        check(self.image_size >= 8 and self.image_size % 4 == 0, "data.image_size", self.image_size,
              "a multiple of 4 that is at least 8")
        for name in ("n_gm", "n_am", "n_attack", "n_eval"):
            check(getattr(self, name) >= 8, f"data.{name}", getattr(self, name), "an integer >= 8")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GenConfig:
    """The generator zoo: widths, training steps and the FID classifier."""

    latent: int = 32
    width: int = 16
    batch_size: int = 64
    lr_gan: float = 2e-4
    lr: float = 1e-3
    gan_steps: int = 1500
    vae_steps: int = 1500
    made_steps: int = 1500
    made_hidden: int = 256
    ddpm_steps: int = 2000
    ddpm_timesteps: int = 50
    fid_steps: int = 400
    seed: int = 1

    def __post_init__(self):
        for name in ("latent", "width", "batch_size", "gan_steps", "vae_steps", "made_steps", "made_hidden",
                     "ddpm_steps", "ddpm_timesteps", "fid_steps"):
            check(getattr(self, name) >= 1, f"gen.{name}", getattr(self, name), "an integer >= 1")
        check(self.lr_gan > 0 and self.lr > 0, "gen.lr", (self.lr_gan, self.lr), "positive learning rates")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AMConfig:
    """The four attribution models (7-way: real + 6 generators), trained together in one program."""

    width: int = 16
    hidden: int = 128
    dct_block: int = 4
    steps: int = 1500
    batch_size: int = 128
    lr: float = 1e-3
    seed: int = 2

    def __post_init__(self):
        for name in ("width", "hidden", "dct_block", "steps", "batch_size"):
            check(getattr(self, name) >= 1, f"am.{name}", getattr(self, name), "an integer >= 1")
        check(self.lr > 0, "am.lr", self.lr, "a positive learning rate")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttackConfig:
    """Our reconstruction of the attack: one U-Net f, additive x + eps tanh f or multiplicative
    x (1 + eps tanh f), trained on real images against a surrogate attributor over random pseudo-generators;
    both attacks are rescaled to the same PSNR (`target_psnr`) before evaluation."""

    width: int = 16
    eps: float = 0.3
    target_psnr: float = 28.0
    steps: int = 1500
    batch_size: int = 64
    lr: float = 1e-3
    pseudo_gms: int = 6
    pseudo_beta: float = 0.08
    fidelity: float = 10.0
    surrogate_width: int = 16
    pgd_steps: int = 20
    pgd_per_gm: int = 150  # white-box PGD runs on the first fakes of each generator (CPU budget)
    blur_sigma: float = 0.7  # reference attack
    dct_step: float = 0.04  # reference attack
    seed: int = 3

    def __post_init__(self):
        for name in ("width", "steps", "batch_size", "pseudo_gms", "surrogate_width", "pgd_steps", "pgd_per_gm"):
            check(getattr(self, name) >= 1, f"attack.{name}", getattr(self, name), "an integer >= 1")
        check(0 < self.eps < 1, "attack.eps", self.eps, "a number in (0, 1) (the multiplicative factor stays positive)")
        check(10.0 <= self.target_psnr <= 60.0, "attack.target_psnr", self.target_psnr, "a PSNR in [10, 60] dB")
        for name in ("lr", "pseudo_beta", "fidelity", "blur_sigma", "dct_step"):
            check(getattr(self, name) > 0, f"attack.{name}", getattr(self, name), "a positive number")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DefenceConfig:
    """Defences: retraining on attacked fakes, purification (blur, DCT quantisation, a denoising AE trained on
    real images) and spectrum normalisation; each defended attribution model is retrained on its inputs."""

    defences: tuple[str, ...] = DEFENCES
    blur_sigma: float = 1.0
    dct_step: float = 0.03
    dae_steps: int = 800
    dae_noise: float = 0.1
    seed: int = 4

    def __post_init__(self):
        check(len(self.defences) >= 1 and self.defences[0] == "none" and set(self.defences) <= set(DEFENCES),
              "defence.defences", self.defences, f"'none' first, then names from {DEFENCES}")
        for name in ("blur_sigma", "dct_step", "dae_noise"):
            check(getattr(self, name) > 0, f"defence.{name}", getattr(self, name), "a positive number")
        check(self.dae_steps >= 1, "defence.dae_steps", self.dae_steps, "an integer >= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    data: DataConfig = DataConfig()
    gen: GenConfig = GenConfig()
    am: AMConfig = AMConfig()
    attack: AttackConfig = AttackConfig()
    defence: DefenceConfig = DefenceConfig()
    eval_batch: int = 500
    grid_samples: int = 16

    def __post_init__(self):
        check(self.eval_batch >= 1, "eval_batch", self.eval_batch, "an integer >= 1")
        check(self.grid_samples >= 1, "grid_samples", self.grid_samples, "an integer >= 1")
        check(self.data.image_size % self.am.dct_block == 0, "am.dct_block", self.am.dct_block,
              f"a divisor of data.image_size={self.data.image_size}")


def tiny() -> Config:
    """Tests: digits 16x16, tens of steps. `iclr26 run deepfake_attack --preset tiny` (~1-2 min on 2 cores, mostly compiling)."""
    return Config(
        data=DataConfig(source="digits", image_size=16, n_gm=400, n_am=120, n_attack=200, n_eval=60),
        gen=GenConfig(latent=8, width=8, batch_size=32, gan_steps=30, vae_steps=30, made_steps=30,
                      made_hidden=32, ddpm_steps=30, ddpm_timesteps=8, fid_steps=30),
        am=AMConfig(width=8, hidden=32, steps=40, batch_size=32),
        attack=AttackConfig(width=8, steps=30, batch_size=16, pseudo_gms=3, surrogate_width=8, pgd_steps=3),
        defence=DefenceConfig(dae_steps=20), eval_batch=120, grid_samples=8)


def demo() -> Config:
    """`iclr26 run deepfake_attack --preset demo`: MNIST 28x28, every stage briefly (about half of it compiling),
    one defence (blur); under 3 minutes on 2 idle cores."""
    return Config(
        data=DataConfig(n_gm=1000, n_am=200, n_attack=300, n_eval=100),
        gen=GenConfig(gan_steps=60, vae_steps=60, made_steps=60, made_hidden=128, ddpm_steps=50,
                      ddpm_timesteps=10, fid_steps=100),
        am=AMConfig(steps=80, batch_size=64),
        attack=AttackConfig(steps=30, batch_size=16, pseudo_gms=3, pgd_steps=3, pgd_per_gm=30),
        defence=DefenceConfig(defences=("none", "blur"), dae_steps=50), eval_batch=200, grid_samples=8)


def bench() -> Config:
    """`python benchmarks/deepfake_attack.py`: the committed run (< 60 min on 2 cores): the default generators,
    attribution models trained 1,000 steps, the attack 1,000 steps of batch 32 per mode, PGD 10 steps on 100
    fakes per generator."""
    return Config(am=AMConfig(steps=1000), attack=AttackConfig(steps=1000, batch_size=32, pgd_steps=10, pgd_per_gm=100))


def paper() -> Config:
    """The benchmark protocol with longer training (the paper's face-image grid is not runnable here)."""
    return Config(gen=GenConfig(gan_steps=5000, vae_steps=4000, made_steps=4000, ddpm_steps=8000, ddpm_timesteps=100),
                  am=AMConfig(steps=4000), attack=AttackConfig(steps=5000, pgd_steps=50),
                  defence=DefenceConfig(dae_steps=3000))


PRESETS = {"tiny": tiny(), "demo": demo(), "bench": bench(), "paper": paper()}
