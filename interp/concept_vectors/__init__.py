"""Concept vectors vs function vectors (paper 4, Opiełka et al., ICLR 2026): FV heads by causal mediation,
CV heads by RSA, vectors through `o_proj` and steering in and out of distribution, on a small decoder trained
here on a generated concepts x formats x languages suite (see README.md)."""

from core.registry import Experiment
from interp.concept_vectors.configs import CVConfig, presets


def _run(config, workdir):
    from interp.concept_vectors.train import run
    return run(config, workdir)


EXPERIMENT = Experiment(
    name="concept_vectors",
    paper=4,
    title="Function vectors (CIE heads) vs concept vectors (RSA heads): orthogonality, overlap, steering",
    presets=presets(),
    run=_run,
    in_demo=False,  # minutes on 2 cores: `make demo` stays a quick tour (issue #45); run it by name
    runtimes={"tiny": "~1 min on 2 CPU cores", "demo": "~5 min on 2 CPU cores", "paper": "~1 h on 2 CPU cores"},
)

__all__ = ["CVConfig", "EXPERIMENT", "presets"]
