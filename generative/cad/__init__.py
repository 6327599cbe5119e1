"""PTA (paper 12): plan-then-act generation of DeepCAD command sequences from text, executed into geometry.
The command language and its 8-bit vectors, DeepCAD JSON I/O, a trimesh + shapely + manifold3d executor, a
procedural corpus with plans and four instruction levels, the metrics, and PTA-lite models on core.lm.
See README.md."""

from core.registry import Experiment
from generative.cad.configs import CADConfig, presets


def _run(config, workdir):
    from generative.cad.train import run
    return run(config, workdir)


EXPERIMENT = Experiment(
    name="cad",
    paper=12,
    title="PTA: plan-then-act CAD command generation (planner + requirement-aware actioner vs direct)",
    presets=presets(),
    run=_run,
    in_demo=False,  # minutes on 2 cores: `make demo` stays a quick tour (issue #45); run it by name
    runtimes={"tiny": "~1 min on 2 CPU cores", "demo": "~4 min on 2 CPU cores", "paper": "hours on 2 CPU cores"},
)

__all__ = ["CADConfig", "EXPERIMENT", "presets"]
