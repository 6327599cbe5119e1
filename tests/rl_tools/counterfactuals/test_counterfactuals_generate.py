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


# --- repairs (issue 31): split by program, structural variety, chance baselines, teacher traces -------------

@pytest.fixture(scope="module")
def level1():
    return generate.generate_all({"if_else_train": 600, "if_else": 150}, seed=3, levels=(1,))[0]


def test_in_distribution_split_is_by_program_and_leak_free(level1):
    train, test = level1["if_else_train"], level1["if_else"]
    leak = generate.leakage(train, test)
    assert leak["program_overlap"] == 0.0 and leak["computation_overlap"] == 0.0
    assert {generate.program_side(it.program) for it in train} == {"train"}
    assert {generate.program_side(it.program) for it in test} == {"test"}
    # renaming variables does not make a new program: the side and the key follow the canonical form
    it = test[0]
    renamed = P.Program(it.program.latents, it.program.body, it.program.ret, it.program.modulus, ("q", "acc"))
    assert P.canonical(renamed) == P.canonical(it.program) and generate.program_side(renamed) == "test"
    assert "def f(q):" in P.to_python(renamed) and "acc = q" in P.to_python(renamed)
    # the measure can fail: a test set drawn from the training programs leaks
    assert generate.leakage(train, train[:50])["program_overlap"] == 1.0


def test_every_family_draws_thousands_of_distinct_programs():
    import random
    counts = {}
    for fam in T.FAMILIES:
        ts, rng = T.templates_of(fam), random.Random(7)
        counts[fam] = len({P.canonical(ts[i % len(ts)].build(rng, T.LEVELS[1 + i % 3])) for i in range(3000)})
    assert all(counts[f] >= 2000 for f in ("if_else", "if_else_long", "while", "multi_r")), counts
    assert counts["math"] >= 900, counts
    assert len(T.templates_of("math")) > 3
    # within one template the structure itself varies (operators, branch lengths, elifs), not only constants
    rng = random.Random(0)
    skel = {P.skeleton(T._ie3(rng, T.LEVELS[1])) for _ in range(300)}
    assert len(skel) >= 50, len(skel)


def test_generated_items_are_distinct_programs(level1):
    train = level1["if_else_train"]
    assert len({P.canonical(it.program) for it in train}) >= 0.95 * len(train)
    assert len({it.program.names for it in train}) > 10


def test_chance_baselines_by_hand():
    from rl_tools.counterfactuals import baselines
    # y = x + r, r in 1..3, return y % 4; observed f(1) = 3 -> r = 2; f(2) under r in {1, 2, 3} = {3, 0, 1}
    prog = P.Program((("r", 1, 3),), (P.Assign(T.add(T.X, T.R)),), T.Y, 4)
    item = generate.Item(id="h", split="if_else", template_id="h", difficulty=1, program=prog, x0=1, y0=3, x1=2,
                         r_true=(2,), consistent=((2,),), answer_cf=(0,), answer_iv=(0,), answer_factual=(3,),
                         prior=(0, 1, 3))
    ch = baselines.item_chance(item, "counterfactual")
    assert ch["random_latent_em"] == pytest.approx(1 / 3) and ch["random_latent_f1"] == pytest.approx(1 / 3)
    assert ch["uniform_em"] == pytest.approx(1 / 4)
    assert ch["prior_em"] == 0.0 and ch["prior_f1"] == pytest.approx(2 * 1 / 4)
    assert baselines.best_chance(ch) == pytest.approx(1 / 3) and baselines.best_chance(ch, "f1") == 0.5
    rows = baselines.chance_rows({"if_else": [item]}, ("counterfactual", "factual"))
    assert rows[0]["best_em"] == pytest.approx(1 / 3, abs=1e-4) and rows[0]["set_size"] == 1.0
    with pytest.raises(ValueError, match="variant='nope'"):
        baselines.item_chance(item, "nope")


def test_chance_prior_set_never_matches_kept_items(splits):
    from rl_tools.counterfactuals import baselines
    items, _ = splits
    rows = baselines.chance_rows({s: items[s][:30] for s in ("if_else", "while", "multi_r", "math")},
                                 ("counterfactual",))
    for r in rows:
        assert r["prior_em"] == 0.0 and 0 < r["prior_f1"] < 1
        assert 0 < r["random_latent_em"] < 1 and r["best_em"] >= r["uniform_em"]


def test_teacher_traces_reach_the_gold_set_on_every_split(splits):
    from rl_tools.counterfactuals import data, teacher
    items, _ = splits
    for split in ("if_else", "if_else_long", "while", "multi_r", "math"):
        for it in items[split][:20]:
            st = teacher.steps(it)
            assert tuple(map(tuple, st["consistent"])) == it.consistent
            assert tuple(st["answer"]) == it.answer_cf
            words = teacher.trace_words(it)
            assert words[0] == "abduce" and "predict" in words and words[-1] == "=>"
            data.check_in_vocab(words)
            text = teacher.trace_text(it)
            assert text.startswith("Abduction") and text.endswith("{" + ", ".join(map(str, it.answer_cf)) + "}")
            assert teacher.has_abduction(text) and teacher.has_abduction(" ".join(words))
    assert not teacher.has_abduction("12 36 => 0") and not teacher.has_abduction(None)
    # each abduction run compares its output with y0 as a test (`== y y0 T ok` / `== y y0 F`); `predict x x1`
    it = items["if_else"][0]
    words, st = teacher.trace_words(it), teacher.steps(it)
    runs = [run.split() for run in " ".join(words[1:words.index("predict")]).split("r ")[1:]]
    assert len(runs) == len(st["abduction"]) and any(ok for _, _, ok in st["abduction"])
    for run, (_, y, ok) in zip(runs, st["abduction"]):
        assert run[-5:] == ["==", str(y), str(it.y0), "T", "ok"] if ok else run[-4:] == ["==", str(y), str(it.y0), "F"]
    assert words[words.index("predict"):words.index("predict") + 3] == ["predict", "x", str(it.x1)]
    # the flow-style teacher writes each run's execution (programs.flow_trace) between `r v` and `-> y`
    it = items["if_else"][0]
    flow, values = teacher.trace_words(it, "flow"), teacher.trace_words(it)
    expected, k = [], 0
    phase = it.x0
    while k < len(values):
        w = values[k]
        expected.append(w)
        if w == "predict":
            phase = it.x1
        if w == "r":
            r = tuple(int(v) for v in values[k + 1:k + 1 + len(it.program.latents)])
            expected += [str(v) for v in r] + P.flow_trace(it.program, phase, r)
            k += len(r)
        k += 1
    assert flow == expected and len(flow) > len(values)
    with pytest.raises(ValueError, match="trace style"):
        teacher.trace_words(it, "lines")
    tok = data.CompactTokenizer()
    ex = data.examples(items["if_else"][:5], ("counterfactual",), tok, trace=True)
    assert tok.decode(ex[0][1]).split()[0] == "abduce"
