"""VaseVQA-3D (paper 18, arXiv 2510.04479): procedural 3D Greek vases rendered in six views, captions and QA
over six attributes in the released schema, the released caption metrics, and VaseVLM's recipe (LoRA SFT with
the vision tower frozen, then GRPO with an attribute reward) on the project's small VLM."""

from core.registry import Experiment
from multimodal.vasevqa.configs import Config, presets
from multimodal.vasevqa.train import train_and_evaluate

EXPERIMENT = Experiment(
    name="vasevqa",
    paper=18,
    title="VaseVQA-3D and VaseVLM (arXiv 2510.04479): 3D vase captioning, SFT then GRPO",
    presets=presets(),
    run=train_and_evaluate,
    demo_preset="demo",
    in_demo=False,  # minutes on 2 cores: run it by name
    runtimes={"tiny": "under a minute (compiles) on a shared 2-core CPU",
              "demo": "19 min 53 s wall measured under nice at load average 20-25 on the shared 2-core CPU "
                      "(168 s of CPU time: 14 % of one core); see multimodal/vasevqa/README.md"},
)

__all__ = ["EXPERIMENT", "Config", "presets", "train_and_evaluate"]
