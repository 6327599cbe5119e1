"""The LLM-planner path (`planner_path`) on a random-init HF folder with a word-level tokenizer: the folder is
loaded, fine-tuned on (instruction -> plan) pairs in ChatML, and its greedy plans feed the actioner."""

import dataclasses

import jax
import numpy as np
import pytest

from core.config import BadInputError
from core.lm import model as model_lib
from core.lm.configs import LMConfig
from core.lm.tokenizer import train_word_level
from core.lm.weights import save_hf
from generative.cad import corpus, hf, train
from generative.cad.configs import presets

pytest.importorskip("manifold3d")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    parts = corpus.make_corpus(200, 0)
    texts = [hf.prompt_text(p, lv) for p in parts for lv in range(4)] + [" ".join(p.plan) for p in parts]
    tok = train_word_level(texts)
    config = LMConfig(architecture="qwen2", vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64,
                      num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16)
    _, params = model_lib.init(config, jax.random.key(0))
    path = tmp_path_factory.mktemp("planner")
    save_hf(path, config, params)
    tok.save(path)
    return path


def test_the_llm_planner_is_fine_tuned_and_plans(folder, tmp_path):
    cfg = dataclasses.replace(presets()["tiny"], planner_path=str(folder), planner_steps=60, planner_lr=1e-2,
                              batch_size=8, n_train=100, log_every=10, arms=("pta",))
    train_parts, test_parts = train.make_parts(cfg)
    models = train.train_all(cfg, train_parts, tmp_path, progress_bar=False)
    planner, history = models["planner"], models["history"]["planner"]
    assert isinstance(planner, hf.LLMPlanner)
    assert history[-1]["loss"] < 0.3 * history[0]["loss"]
    plans = train.llm_plans(planner, test_parts, 3, max_new_tokens=40, batch=4)
    assert len(plans) == len(test_parts)
    exact = np.mean([pl == list(p.plan) for pl, p in zip(plans, test_parts)])
    assert exact > 0  # a short plan vocabulary: 60 steps write some plans exactly
    rows, _ = train.evaluate_all(cfg, models, test_parts)
    assert {r["arm"] for r in rows} == {"pta"} and all("plan_exact" in r for r in rows)


def test_a_missing_planner_folder_is_one_clear_error(tmp_path):
    cfg = dataclasses.replace(presets()["tiny"], planner_path=str(tmp_path / "nowhere"), arms=("pta",))
    with pytest.raises(BadInputError, match="planner_path=.*config.json"):
        train.train_all(cfg, corpus.make_corpus(8, 0), tmp_path)


def test_the_paper_preset_plans_with_a_local_llm():
    assert presets()["paper"].planner_path.endswith("Qwen2.5-1.5B-Instruct")
