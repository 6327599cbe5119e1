"""SFT vs RL (issue 31): the set-match reward, the presets, and a tiny base -> SFT + GRPO run end to end."""

import dataclasses
import json

import jax
import pytest

from rl_tools.counterfactuals import EXPERIMENT, sft_rl
from rl_tools.counterfactuals.configs import train_presets


def test_set_match_reward_accepts_every_rendering_of_the_gold_set():
    env = sft_rl.SetMatch()
    state = env.reset((1, 4))
    for text in ("{1, 4}", "{4, 1}", "4 1", "abduce r 1 -> 2 ok predict r 1 -> 4 ; => 1 4", "[4, 1, 4]"):
        assert env.step(state, text) == (None, True, 1.0), text
    for text in ("{1}", "{1, 4, 5}", "", "=> 2"):
        assert env.step(state, text)[2] == 0.0, text


def test_abduced_latents_and_abduction_right_on_hand_written_traces():
    from rl_tools.counterfactuals import generate, teacher
    parse = teacher.abduced_latents
    assert parse("abduce r 1 -> 4 r 2 -> 3 ok r 3 -> 3 ok predict r 2 -> 1 ; => 1", 1) == {(2,), (3,)}
    assert parse("abduce r 1 n0 + 2 1 3 -> 3 ok r 2 n0 + 2 2 4 -> 4 => 0", 1) == {(1,)}  # runs in flow form
    assert parse("abduce r 1 2 -> 4 ok r 1 3 -> 5 predict", 2) == {(1, 2)}  # two latents per header
    assert parse("abduce r 1 -> 4 r 2 -> 5 predict ; => 1", 1) == frozenset()  # nothing marked
    for bad in ("12 36 => 0", None, "abduce 1 -> 4 ok", "abduce r x -> 4 ok", "abduce r 1 -> 4 r ok"):
        assert parse(bad, 1) is None, bad
    items, _ = generate.generate_all({"if_else_train": 1, "if_else": 5}, seed=0, levels=range(1, 2))
    for it in items["if_else"]:
        gold = " ".join(teacher.trace_words(it, "flow"))
        assert sft_rl.abduction_right(it, gold)
        assert not sft_rl.abduction_right(it, gold.replace(" ok", ""))  # every item has a consistent latent
        assert not sft_rl.abduction_right(it, "=> " + " ".join(map(str, it.answer_cf)))  # right answer, no abduction


def test_presets_and_experiments():
    names = [e.name for e in EXPERIMENT]
    assert names == ["counterfactuals", "cf_sft", "cf_rl"]
    presets = train_presets()
    for arm in ("sft", "rl"):
        assert set(presets[arm]) == {"tiny", "demo", "paper"}
        assert presets[arm]["demo"].arms == (arm,) and presets[arm]["demo"].base.trace
    assert presets["rl"]["demo"].group_size >= 8 and presets["rl"]["paper"].group_size == 24
    with pytest.raises(ValueError, match="arms"):
        sft_rl.CFTrainConfig(arms=("dpo",))
    with pytest.raises(ValueError, match="group_size"):
        sft_rl.CFTrainConfig(group_size=1)
    with pytest.raises(ValueError, match="sft_seq_len"):
        sft_rl.CFTrainConfig(sft_seq_len=-1)
    paper = presets["rl"]["paper"]
    assert paper.model_dir.endswith("Qwen2.5-1.5B-Instruct") and paper.prompts_per_step == 16


def test_tiny_base_sft_and_grpo_then_reload_the_base(tmp_path):
    config = dataclasses.replace(train_presets()["sft"]["tiny"], arms=("sft", "rl"))
    metrics = sft_rl.run(config, tmp_path / "run")
    out = json.loads((tmp_path / "run" / "compare.json").read_text())
    assert set(out["models"]) == {"base", "sft", "rl"}
    for name in ("sft", "rl"):
        for split in sft_rl.EVAL_SPLITS:
            m = out["models"][name][split]
            assert 0.0 <= m["em"] <= 1.0 and 0.0 <= m["abduction_share"] <= 1.0
            assert 0.0 <= m["abduction_right"] <= m["abduction_share"]
    assert all(0 < out["chance"][s]["best_em"] < 1 for s in sft_rl.EVAL_SPLITS)
    assert len(out["rl_reward"]) == config.rl_steps
    assert 0.0 <= metrics["sft/if_else/cf_em"] <= 1.0
    # a saved base (as benchmarks/counterfactuals.py writes per seed) is reused instead of retrained
    base = tmp_path / "run" / "base"
    (base / "eval.json").write_text(json.dumps({"rows": [
        {"split": s, "variant": v, "em": 0.5, "f1": 0.5} for s in sft_rl.EVAL_SPLITS
        for v in ("counterfactual", "interventional")]}))
    _, params, rows = sft_rl.base_model(dataclasses.replace(config, base_dir=str(base)), None, None, tmp_path)
    assert rows[0]["em"] == 0.5 and len(jax.tree.leaves(params)) > 0
    with pytest.raises(FileNotFoundError, match="base_dir"):
        sft_rl.base_model(dataclasses.replace(config, base_dir=str(tmp_path / "nope")), None, None, tmp_path)
