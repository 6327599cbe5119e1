"""Prompt builders against fixed expected strings and token sequences; the first-answer-token rules."""

import numpy as np
import pytest

from core.config import ConfigError
from interp.concept_vectors import prompts
from interp.concept_vectors.world import LETTERS, Cell, World, WorldConfig, left_pad


def test_open_ended_prompt_fixed_string():
    prompt, target = prompts.open_ended_prompt([("hot", "cold"), ("up", "down")], ("big", "small"))
    assert prompt == "Q: hot\nA: cold\n\nQ: up\nA: down\n\nQ: big\nA:"
    assert target == " small"


def test_multiple_choice_block_fixed_string():
    block = prompts.mc_block("big", ["small", "cold", "left", "right"], "a")
    assert block == ("### Instruction: Q: big A: ?\n(a) small\n(b) cold\n(c) left\n(d) right\n"
                     "### Response: (a)")
    query = prompts.mc_block("big", ["left", "small", "cold", "right"], None)
    assert query.endswith("(d) right\n### Response: (")


def test_multiple_choice_prompt_letter_points_at_the_answer():
    outputs = ["cold", "small", "down", "left", "right", "dark"]
    for seed in range(20):
        prompt, letter = prompts.multiple_choice_prompt([("hot", "cold")], ("big", "small"), outputs,
                                                        np.random.default_rng(seed))
        query = prompt.split("\n\n")[-1]
        assert query.endswith("### Response: (")
        assert f"({letter}) small\n" in query
        options = [line[4:] for line in query.splitlines()[1:5]]
        assert len(set(options)) == 4 and set(options) <= set(outputs)
        demo = prompt.split("\n\n")[0]
        demo_letter = demo[-2]
        assert f"({demo_letter}) cold\n" in demo and demo.endswith(f"### Response: ({demo_letter})")


def test_build_prompts_shuffled_labels_keep_the_answer_multiset():
    pairs = [(f"x{i}", f"y{i}") for i in range(10)]
    clean = prompts.build_prompts(pairs, "OE", num=3, shots=4, seed=1)
    assert all(p.count("\nA: y") == 4 and t.startswith(" y") for p, t in clean)
    corrupted = prompts.build_prompts(pairs, "OE", num=30, shots=4, seed=1, shuffle_labels=True)
    mismatched = 0
    for p, _ in corrupted:
        demos = p.split("\n\n")[:-1]
        xs = [d.split("\n")[0][4:] for d in demos]
        ys = [d.split("\n")[1][3:] for d in demos]
        mismatched += sum(x[1:] != y[1:] for x, y in zip(xs, ys))
    assert mismatched > 0
    with pytest.raises(ConfigError, match="format='XX'"):
        prompts.build_prompts(pairs, "XX", num=1, shots=2, seed=0)
    with pytest.raises(ConfigError, match="dataset of 10 pairs"):
        prompts.build_prompts(pairs, "OE", num=1, shots=10, seed=0)


def test_first_answer_token_llama_and_qwen_rules():
    vocab = {" cold": 7, "cold": 9, "a": 3}
    llama = lambda s: [128000, vocab[s]]  # noqa: E731  BOS first
    qwen = lambda s: [vocab[s]]  # noqa: E731
    assert prompts.first_answer_token(llama, " cold", bos_id=128000) == 7
    assert prompts.first_answer_token(qwen, " cold", bos_id=None) == 7
    assert prompts.first_answer_token(qwen, "cold", bos_id=151643) == 9  # no BOS emitted: ids[0]
    assert prompts.first_answer_token(llama, "a", bos_id=128000) == 3  # MC: the letter after "("
    with pytest.raises(ConfigError, match="no token besides BOS"):
        prompts.first_answer_token(lambda s: [1], "x", bos_id=1)


def test_world_prompts_fixed_tokens():
    world = World(WorldConfig(num_entities=16, num_categories=4, max_shots=3))
    rng = np.random.default_rng(0)
    tokens, target, answer_pos, x = world.prompt(Cell("successor", "OE", "L1"), 2, rng)
    text = world.decode(tokens)
    demo = text.split(" ; ")
    assert len(demo) == 3 and demo[-1] == f"Q L1:{x} A"
    for d in demo[:-1]:
        q, a = d.split(" ")[1], d.split(" ")[3]
        assert int(a[3:]) == (int(q[3:]) + 1) % 16
    assert world.token_name(target) == f"L1:{(x + 1) % 16}"
    assert [world.token_name(tokens[p]) for p in answer_pos] == [d.split(" ")[3] for d in demo[:-1]]
    # translation goes to the other language; MC ends at "R (" and the target is the answer's letter
    tokens, target, _, x = world.prompt(Cell("translation", "MC", "L1"), 1, rng)
    text = world.decode(tokens)
    assert text.endswith("R (") and text.count("(a)") == 2
    query = text.split(" ; ")[-1].split(" ")
    letter = world.token_name(target)
    assert letter in "abcd" and target in LETTERS
    assert query[query.index(f"({letter})") + 1] == f"L2:{x}"
    assert world.decode([1, world.token(3, "L1"), 2, world.token(3, "L2"), 3]) == "Q L1:3 A L2:3 ;"


def test_world_held_out_cells_and_ambiguous_prompts():
    world = World(WorldConfig(num_entities=16, num_categories=4, held_out_concept="successor"))
    held = {c.name for c in world.cells() if world.is_held_out(c)}
    assert held == {f"{c}-MC-L2" for c in ("antonym", "successor", "category", "copy", "translation")} | {
        "successor-OE-L2"}
    rows = world.training_rows(64, 128, seed=0)
    r, j = np.nonzero(rows["inputs"] == 4)  # "?" opens an MC question: Q x A ?
    assert r.size > 0 and np.all(rows["inputs"][r, j - 3] == 1)
    assert np.all(rows["inputs"][r, j - 2] < world.token(0, "L2"))  # no MC question in L2 is trained
    r, j = np.nonzero((rows["inputs"][:, :-2] == 1) & (rows["inputs"][:, 2:] == 2))  # Q x A of every question
    x = rows["inputs"][r, j + 1]
    assert np.any(x >= world.token(0, "L2"))  # L2 is trained (OE)
    tokens, target, x = world.ambiguous_prompt("antonym", 4, np.random.default_rng(0))
    parts = world.decode(tokens).split(" ; ")
    assert parts[1].split(" ")[3].startswith("L2:") and parts[0].split(" ")[3].startswith("L1:")
    assert target == world.answer("antonym", x, "L1")
    padded, mask = left_pad([[1, 2], [1, 2, 3]])
    assert padded.tolist() == [[0, 1, 2], [1, 2, 3]] and mask.tolist() == [[False, True, True], [True] * 3]


def test_world_mc_share_sets_the_format_mixture():
    def mc_fraction(share, n=2000):
        examples = World(WorldConfig(num_entities=16, num_categories=4, mc_share=share)).training_examples(
            np.random.default_rng(0))
        return np.mean([4 in next(examples)[0] for _ in range(n)])  # "?" opens an MC question

    assert mc_fraction(0.0) == 0.0 and mc_fraction(1.0) == 1.0
    assert abs(mc_fraction(0.7) - 0.7) < 0.035  # 3.5 binomial standard deviations at n = 2000
    assert abs(mc_fraction(None) - 5 / 14) < 0.04  # uniform over the 14 trained cells, 5 of them MC
    with pytest.raises(ConfigError, match="world.mc_share=1.5"):
        WorldConfig(mc_share=1.5)
