"""Generator: determinism, filtering, deduplication, template separation, Python integer semantics."""

import hashlib
import json

import pytest

from rl_tools.counterfactuals import export, generate
from rl_tools.counterfactuals import programs as P
from rl_tools.counterfactuals import templates as T
from rl_tools.counterfactuals.sandbox import Sandbox

SIZES = {"if_else_train": 300, "if_else": 100, "if_else_long": 60, "while": 60, "multi_r": 60, "math": 60}


def _digest(items):
    h = hashlib.sha256()
    for split in items:
        for it in items[split]:
            for v in generate.VARIANTS:
                h.update(json.dumps(export.record(it, v), sort_keys=True).encode())
    return h.hexdigest()


@pytest.fixture(scope="module")
def splits():
    return generate.generate_all(SIZES, seed=0)


def test_same_seed_same_bytes_other_seed_other_bytes(splits):
    items, _ = splits
    again, _ = generate.generate_all(SIZES, seed=0)
    other, _ = generate.generate_all(SIZES, seed=1)
    assert _digest(items) == _digest(again)
    assert _digest(items) != _digest(other)


def test_sizes_and_ids(splits):
    items, stats = splits
    for split, n in SIZES.items():
        assert len(items[split]) == n == stats[split].items
        assert len({it.id for it in items[split]}) == n


def test_every_item_needs_abduction_and_answers_are_consistent(splits):
    items, stats = splits
    for its in items.values():
        for it in its:
            assert it.answer_cf != it.prior and len(it.prior) > 1
            assert set(it.answer_cf) <= set(it.prior)
            assert it.r_true in it.consistent  # the true latent explains the observation
            assert it.answer_iv[0] in it.answer_cf  # ... so its prediction is in the counterfactual set
            assert P.run(it.program, it.x0, it.r_true) == it.y0 and it.answer_factual == (it.y0,)
            assert it.x0 != it.x1
    # the naive if/else generator makes about a third of items abduction-irrelevant (method notes: 36%)
    st = stats["if_else_train"]
    frac = st.filtered_abduction_irrelevant / (st.items + st.filtered_abduction_irrelevant + st.duplicates)
    assert 0.25 < frac < 0.5, frac
    assert st.filtered_r_independent > 0


def test_no_duplicates_and_test_excludes_train(splits):
    items, _ = splits
    for its in items.values():
        assert len({it.key() for it in its}) == len(its)
    train = {it.key() for it in items["if_else_train"]}
    assert not train & {it.key() for it in items["if_else"]}


def test_templates_strictly_separated_between_train_and_ood():
    import random
    skeletons = {}
    for t in T.TEMPLATES:
        rng = random.Random(0)
        skeletons.setdefault(t.family, set()).update(P.skeleton(t.build(rng, T.LEVELS[lv])) for lv in (1, 2, 3)
                                                     for _ in range(3))
    for fam in ("if_else_long", "while", "multi_r", "math"):
        assert not skeletons["if_else"] & skeletons[fam], fam
    assert len(T.templates_of("if_else")) == 8


def test_split_structure(splits):
    items, _ = splits
    assert all(len(it.program.latents) == 3 for it in items["multi_r"])
    assert any("for i in range" in it.code for it in items["multi_r"])
    assert all("while " in it.code for it in items["while"])
    assert all(it.story and it.domain == "math" for it in items["math"])
    assert max(it.code.count("    if ") + it.code.count("        if ") for it in items["if_else_long"]) >= 2


def test_python_modulo_semantics_floor():
    # y = x - 5, return (y + r) % 7: at x = 2, r = 1 Python gives -2 % 7 = 5 (C-style remainder: -2);
    # at x = 0, r = 1: -4 % 7 = 3 (C-style: -4)
    prog = P.Program((("r", 1, 3),), (P.Assign(T.sub(T.X, T.C(5))),), T.add(T.Y, T.R), 7)
    assert P.run(prog, 2, (1,)) == 5 and P.run(prog, 0, (1,)) == 3
    with Sandbox() as sb:
        res = sb.run(P.to_python(prog), [(2, (1,)), (0, (1,))])
    assert res.values == (5, 3)


def test_bad_arguments():
    with pytest.raises(ValueError, match="split='nope'"):
        generate.generate_split("nope", 3)
    with pytest.raises(ValueError, match="levels"):
        generate.generate_split("if_else", 3, levels=(4,))
    with pytest.raises(ValueError, match="latents"):
        P.run(T._ie1(__import__("random").Random(0), T.LEVELS[1]), 1, (1, 2))
