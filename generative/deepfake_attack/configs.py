"""Configs for the DeepFake-attribution attack benchmark: frozen keyword-only dataclasses and presets.

Presets:
- `tiny`: scikit-learn's 8x8 digits resized to 16x16, a few dozen steps per model (tests; seconds).
- `demo`: MNIST 28x28, every stage briefly, three generators, the black-box attack only (the rest one `--set`
  away), two readings, one defence, under a minute (`iclr26 run deepfake_attack --preset demo`).
- `bench`: the committed benchmark (`benchmarks/deepfake_attack.py`): MNIST 28x28, 6 generators, 4
  attribution models, 6 defences, 3 seeds within about an hour on 2 idle CPU cores.
- `faces64`: 64 px grayscale faces from a user-supplied folder (`--set data.folder=...`), for a GPU.
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
READINGS = ("additive", "pixel_gain", "spectral_gain")  # see attacks.py
KINDS = ("pgd", "universal", "blackbox")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Disjoint pools of real digits: generator training, attribution training, attack training, evaluation."""

    source: Literal["mnist", "digits", "folder"] = "mnist"  # MNIST, scikit-learn 8x8 digits, or an image folder
    image_size: int = 28  # 28 for MNIST; digits / folder images are resized to this size (16 in tests)
    folder: str = ""  # source "folder": a directory of images (PNG / JPEG, searched recursively), read as grayscale
    fakes_folder: str = ""  # samples of your own generators, one subfolder of images per generator: replaces the zoo
    n_gm: int = 4000  # real images the generators learn from
    n_am: int = 2000  # real class of the attribution training set; also fakes per generator
    n_attack: int = 2000  # real images the attack is trained on (it never sees a fake)
    n_eval: int = 1000  # real evaluation images; also evaluation fakes per generator
    seed: int = 0

    def __post_init__(self):
        check(self.source in ("mnist", "digits", "folder"), "data.source", self.source, "'mnist', 'digits' or 'folder'")
        check(self.image_size >= 8 and self.image_size % 4 == 0, "data.image_size", self.image_size,
              "a multiple of 4 that is at least 8")
        for name in ("n_gm", "n_am", "n_attack", "n_eval"):
            check(getattr(self, name) >= 8, f"data.{name}", getattr(self, name), "an integer >= 8")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GenConfig:
    """The generator zoo: widths, training steps and the FID classifier."""

    generators: tuple[str, ...] = GENERATORS  # the zoo: every family by default, a subset for the quick demo
    latent: int = 32  # latent size of the DCGANs and the VAE
    width: int = 16  # base channel width of the DCGANs, discriminator, VAE and DDPM U-Net
    batch_size: int = 64
    lr_gan: float = 2e-4  # Adam learning rate of the DCGANs and their discriminator
    lr: float = 1e-3  # Adam learning rate of the VAE, MADE and DDPM
    gan_steps: int = 1500  # training steps of each DCGAN
    vae_steps: int = 1500  # VAE training steps
    made_steps: int = 1500  # MADE (autoregressive) training steps
    made_hidden: int = 256  # MADE hidden width
    ddpm_steps: int = 2000  # DDPM training steps
    ddpm_timesteps: int = 50  # DDPM diffusion steps T (cosine schedule; sampling runs all of them)
    fid_steps: int = 400  # training steps of the digit classifier whose features define FID
    seed: int = 1

    def __post_init__(self):
        check(len(self.generators) >= 1 and set(self.generators) <= set(GENERATORS)
              and len(set(self.generators)) == len(self.generators), "gen.generators", self.generators,
              f"distinct names from {GENERATORS}")
        for name in ("latent", "width", "batch_size", "gan_steps", "vae_steps", "made_steps", "made_hidden",
                     "ddpm_steps", "ddpm_timesteps", "fid_steps"):
            check(getattr(self, name) >= 1, f"gen.{name}", getattr(self, name), "an integer >= 1")
        check(self.lr_gan > 0 and self.lr > 0, "gen.lr", (self.lr_gan, self.lr), "positive learning rates")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AMConfig:
    """The four attribution models (7-way: real + 6 generators), trained together in one program."""

    width: int = 16  # base channel width of the CNN attributors
    hidden: int = 128  # hidden width of every attributor's classifier head / MLP
    dct_block: int = 4  # block size of the DCT (dct_mlp input, DCT purifier and reference attack)
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
    """The attacks (`attacks.py`): three readings (additive, pixel gain, spectral gain) at one hard PSNR budget
    (`target_psnr`, the same during training and evaluation), each as white-box PGD, a universal white-box
    network trained against the real attribution models, and the black-box universal network (our
    reconstruction of the paper's attack) trained on real images only against a frozen surrogate attributor
    over random pseudo-generators (`traces.py`)."""

    readings: tuple[str, ...] = READINGS  # attack readings to run: additive, pixel_gain, spectral_gain
    kinds: tuple[str, ...] = KINDS  # attacks to run: pgd, universal (the white-box references), blackbox (always)
    width: int = 16  # base channel width of the attack networks
    eps: float = 0.5  # pixel gain in [1 - eps, 1 + eps]
    spectral_eps: float = 1.0  # per-frequency gain in [1 - spectral_eps, 1 + spectral_eps] (1: a peak can be removed)
    target_psnr: float = 28.0  # PSNR budget of every attack, in dB (higher = a smaller perturbation)
    steps: int = 400  # training steps of the black-box attack network, per reading
    universal_steps: int = 300  # training steps of the universal white-box attack network, per reading
    batch_size: int = 32
    lr: float = 1e-3
    pseudo_gms: int = 8  # random pseudo-generators the black-box surrogate learns to tell apart
    pseudo_beta: float = 0.5  # random deviation of the pseudo-generators' up-sampling kernels
    pseudo_residue: float = 0.15  # the diffusion-like pseudo-generators' high-frequency residue
    surrogate_width: int = 16  # base channel width of the surrogate attributor
    surrogate_steps: int = 400  # the surrogate trains on clean real + pseudo-fakes, then is frozen
    pgd_steps: int = 20  # iterations of each white-box PGD attack
    pgd_per_gm: int = 150  # white-box PGD runs on the first fakes of each generator (CPU budget)
    blur_sigma: float = 0.7  # Gaussian-blur sd of the blur reference attack, in pixels
    dct_step: float = 0.04  # block-DCT quantisation step of the dct reference attack
    seed: int = 3

    def __post_init__(self):
        check(len(self.readings) >= 1 and set(self.readings) <= set(READINGS)
              and len(set(self.readings)) == len(self.readings), "attack.readings", self.readings,
              f"distinct names from {READINGS}")
        check("blackbox" in self.kinds and set(self.kinds) <= set(KINDS) and len(set(self.kinds)) == len(self.kinds),
              "attack.kinds", self.kinds, f"distinct names from {KINDS}, 'blackbox' among them (the method itself)")
        for name in ("width", "steps", "universal_steps", "batch_size", "pseudo_gms", "surrogate_width",
                     "surrogate_steps", "pgd_steps", "pgd_per_gm"):
            check(getattr(self, name) >= 1, f"attack.{name}", getattr(self, name), "an integer >= 1")
        check(0 < self.eps < 1, "attack.eps", self.eps, "a number in (0, 1) (the multiplicative factor stays positive)")
        check(0 < self.spectral_eps <= 2, "attack.spectral_eps", self.spectral_eps, "a number in (0, 2]")
        check(10.0 <= self.target_psnr <= 60.0, "attack.target_psnr", self.target_psnr, "a PSNR in [10, 60] dB")
        for name in ("lr", "pseudo_beta", "pseudo_residue", "blur_sigma", "dct_step"):
            check(getattr(self, name) > 0, f"attack.{name}", getattr(self, name), "a positive number")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DefenceConfig:
    """Defences: retraining on attacked fakes, purification (blur, DCT quantisation, a denoising AE trained on
    real images) and spectrum normalisation; each defended attribution model is retrained on its inputs."""

    defences: tuple[str, ...] = DEFENCES  # defences to evaluate, 'none' first: retrain, blur, dct, dae, specnorm
    blur_sigma: float = 1.0  # Gaussian-blur purifier's sd, in pixels
    dct_step: float = 0.03  # DCT purifier's quantisation step of the block-DCT coefficients
    dae_steps: int = 800  # denoising-autoencoder purifier training steps
    dae_noise: float = 0.1  # sd of the Gaussian noise the denoising autoencoder learns to remove
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
    eval_batch: int = 500  # images per evaluation batch
    grid_samples: int = 16  # samples per generator in its PNG grid

    def __post_init__(self):
        check(self.eval_batch >= 1, "eval_batch", self.eval_batch, "an integer >= 1")
        check(self.grid_samples >= 1, "grid_samples", self.grid_samples, "an integer >= 1")
        check(self.data.image_size % self.am.dct_block == 0, "am.dct_block", self.am.dct_block,
              f"a divisor of data.image_size={self.data.image_size}")


def tiny() -> Config:
    """Tests: digits 16x16, tens of steps. `iclr26 run deepfake_attack --preset tiny` (~1-2 min on 2 cores, mostly
    compiling)."""
    return Config(
        data=DataConfig(source="digits", image_size=16, n_gm=400, n_am=120, n_attack=200, n_eval=60),
        gen=GenConfig(latent=8, width=8, batch_size=32, gan_steps=30, vae_steps=30, made_steps=30,
                      made_hidden=32, ddpm_steps=30, ddpm_timesteps=8, fid_steps=30),
        am=AMConfig(width=8, hidden=32, steps=40, batch_size=32),
        attack=AttackConfig(width=8, steps=20, universal_steps=10, surrogate_steps=30, batch_size=16, pseudo_gms=4,
                            surrogate_width=8, pgd_steps=3, pgd_per_gm=10),
        defence=DefenceConfig(dae_steps=20), eval_batch=120, grid_samples=8)


def demo() -> Config:
    """`iclr26 run deepfake_attack --preset demo`: MNIST 28x28, every stage briefly (most of it compiling), three of
    the six generators (a transposed-conv DCGAN, the VAE and MADE; all six with
    `--set gen.generators=dcgan_transposed,dcgan_nearest,dcgan_bilinear,vae,made,ddpm`), the
    black-box attack (the method) in two of the three readings (additive and the paper's spectral gain; all three
    with `--set attack.readings=additive,pixel_gain,spectral_gain`; the white-box references PGD and the universal
    attack with `--set attack.kinds=pgd,universal,blackbox`) and one defence (blur); 46 s alone on 2 idle cores
    with a cold compile cache. The surrogate gets 200 steps: at 60 it still called every image real, which left
    the attack nothing to learn."""
    return Config(
        data=DataConfig(n_gm=1000, n_am=200, n_attack=300, n_eval=100),
        gen=GenConfig(generators=("dcgan_transposed", "vae", "made"), gan_steps=60, vae_steps=60, made_steps=60,
                      made_hidden=128, ddpm_steps=50, ddpm_timesteps=10, fid_steps=100),
        am=AMConfig(steps=80, batch_size=64),
        attack=AttackConfig(readings=("additive", "spectral_gain"), kinds=("blackbox",), width=8, steps=40,
                            universal_steps=30, surrogate_steps=200, batch_size=16, pseudo_gms=4,
                            surrogate_width=8, pgd_steps=3, pgd_per_gm=20),
        defence=DefenceConfig(defences=("none", "blur"), dae_steps=50), eval_batch=200, grid_samples=8)


def bench() -> Config:
    """`python benchmarks/deepfake_attack.py` (3 attack seeds; sized for 2 idle CPU cores, about an hour):
    generators 800-1000 steps, attribution models 600 steps of batch 64, surrogate 400 steps, black-box attack
    300 and universal attack 200 steps of batch 16 per reading, PGD 10 steps from a random start on 25 fakes per
    generator; every defence (retrain, blur, dct, the denoising AE, specnorm)."""
    return Config(data=DataConfig(n_gm=4000, n_am=1500, n_attack=1500, n_eval=500),
                  gen=GenConfig(gan_steps=800, vae_steps=800, made_steps=800, ddpm_steps=1000),
                  am=AMConfig(steps=600, batch_size=64),
                  attack=AttackConfig(steps=300, universal_steps=200, surrogate_steps=400, batch_size=16,
                                      pgd_steps=10, pgd_per_gm=25))


def paper() -> Config:
    """The benchmark protocol with longer training (the paper's face-image grid is not runnable here)."""
    return Config(gen=GenConfig(gan_steps=5000, vae_steps=4000, made_steps=4000, ddpm_steps=8000, ddpm_timesteps=100),
                  am=AMConfig(steps=4000), attack=AttackConfig(steps=3000, universal_steps=2000, surrogate_steps=3000,
                                                               pgd_steps=50),
                  defence=DefenceConfig(dae_steps=3000))


def faces64() -> Config:
    """64 px grayscale faces from a folder the user supplies (`--set data.folder=/path/to/images`), for a GPU:
    the whole protocol with wider models and longer training. Not run in this project (no face data ships)."""
    return Config(data=DataConfig(source="folder", image_size=64, n_gm=10000, n_am=3000, n_attack=3000, n_eval=1000),
                  gen=GenConfig(latent=64, width=32, gan_steps=8000, vae_steps=6000, made_steps=4000, made_hidden=1024,
                                ddpm_steps=10000, ddpm_timesteps=100),
                  am=AMConfig(width=32, hidden=256, dct_block=8, steps=4000),
                  attack=AttackConfig(width=32, steps=3000, universal_steps=2000, surrogate_steps=3000,
                                      surrogate_width=32, pgd_steps=50, pgd_per_gm=200),
                  defence=DefenceConfig(dae_steps=3000), eval_batch=250)


PRESETS = {"tiny": tiny(), "demo": demo(), "bench": bench(), "paper": paper(), "faces64": faces64()}
