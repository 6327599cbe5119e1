"""The chat-model path of SFT vs RL (`model_dir`, issue 31's Qwen2.5 setting) on a random-init HF folder with a
small BPE tokenizer: English ChatML prompts, English teacher targets ended by end-of-turn, base -> SFT + GRPO."""

import dataclasses
import json

import jax
import pytest

from core.config import BadInputError
from core.lm import model as model_lib
from core.lm.configs import LMConfig
from core.lm.tokenizer import IM_START, train_bpe
from core.lm.weights import save_hf
from rl_tools.counterfactuals import export, generate, hf, sft_rl, teacher
from rl_tools.counterfactuals.configs import train_presets


@pytest.fixture(scope="module")
def items():
    its, _ = generate.generate_all({"if_else_train": 40, "if_else": 4, "if_else_long": 4, "while": 4,
                                    "multi_r": 4, "math": 4}, seed=0, levels=range(1, 2))
    return its


@pytest.fixture(scope="module")
def folder(tmp_path_factory, items):
    texts = [hf.prompt(it, v) + teacher.trace_text(it) for its in items.values() for it in its
             for v in ("counterfactual", "interventional")]
    tok = train_bpe(texts, vocab_size=400)
    config = LMConfig(architecture="qwen2", vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64,
                      num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16)
    _, params = model_lib.init(config, jax.random.key(0))
    path = tmp_path_factory.mktemp("chat_model")
    save_hf(path, config, params)
    tok.save(path)
    return path


def test_prompts_and_sft_targets_are_the_english_question_and_teacher_trace(folder, items):
    tok = hf.tokenizer(str(folder))
    it = items["if_else_train"][0]
    text = hf.prompt(it, "counterfactual")
    assert text.startswith(IM_START + "user\n") and text.endswith(IM_START + "assistant\n")
    assert export.question(it, "counterfactual") in text
    exs = hf.sft_examples(items["if_else_train"], tok, 4096)
    assert len(exs) == len(items["if_else_train"])
    prompt_ids, target_ids = exs[0]
    assert tok.decode(prompt_ids, skip_special_tokens=False) == text
    assert target_ids[-1] == tok.eos_id and tok.decode(target_ids[:-1]) == teacher.trace_text(it)
    # rows that do not fit are dropped; none fitting is one clear error in sft()
    assert hf.sft_examples(items["if_else_train"], tok, 8) == []
    # the English abduction is read back: the teacher's consistent set, or None without an abduction step
    for it in items["while"]:
        got = teacher.abduced_latents(teacher.trace_text(it), len(it.program.latent_names))
        assert got == frozenset(tuple(r) for r in it.consistent)
        assert sft_rl.abduction_right(it, teacher.trace_text(it))
    assert teacher.abduced_latents("The answer is {3}.", 1) is None


def test_base_sft_and_grpo_from_a_chat_model_folder(folder, tmp_path):
    config = dataclasses.replace(train_presets()["sft"]["tiny"], arms=("sft", "rl"), model_dir=str(folder),
                                 sft_seq_len=1024)
    sft_rl.run(config, tmp_path / "run")
    out = json.loads((tmp_path / "run" / "compare.json").read_text())
    assert set(out["models"]) == {"base", "sft", "rl"}
    for split in sft_rl.EVAL_SPLITS:
        assert 0.0 <= out["models"]["base"][split]["iv_em"] <= 1.0
        for name in ("sft", "rl"):
            m = out["models"][name][split]
            assert 0.0 <= m["abduction_right"] <= m["abduction_share"] <= 1.0
    assert len(out["rl_reward"]) == config.rl_steps


def test_a_folder_without_weights_or_tokenizer_is_one_clear_error(tmp_path):
    config = dataclasses.replace(train_presets()["sft"]["tiny"], model_dir=str(tmp_path))
    with pytest.raises(BadInputError, match="model_dir=.*config.json, tokenizer.json"):
        sft_rl.run(config, tmp_path / "run")
