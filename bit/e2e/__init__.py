"""BIT's end-to-end stage (paper 1): the pretrained neural encoder's tokens -> a projector -> a LoRA-adapted
language model, trained with next-token cross-entropy plus a symmetric InfoNCE, decoded greedily or by beam
search. `iclr26 run bit_e2e`; see bit/README.md, "End-to-end"."""

from bit.e2e.configs import PRESETS, Config
from bit.e2e.train import run

__all__ = ["Config", "PRESETS", "run"]
