"""Verifier = brute force on 1,000 random items; parsing and scoring against hand-made examples."""

import math

import pytest

from rl_tools.counterfactuals import generate, verify
from rl_tools.counterfactuals.sandbox import Sandbox


def test_verifier_equals_brute_force_on_1000_items():
    sizes = {"if_else": 400, "if_else_long": 150, "while": 150, "multi_r": 150, "math": 150}
    items, _ = generate.generate_all(sizes, seed=7)
    checked = 0
    with Sandbox() as sb:
        for its in items.values():
            for it in its:
                # brute force: the generator's interpreter over every latent vs the Python source in the sandbox
                got = verify.answer_sets(it.code, it.x0, it.y0, it.x1, sb)
                assert "error" not in got, got
                assert tuple(got["counterfactual"]) == it.answer_cf
                assert tuple(got["prior"]) == it.prior
                assert tuple(map(tuple, got["consistent"])) == it.consistent
                assert verify.interventional_answer(it.code, it.x1, it.r_true, sb) == it.answer_iv[0]
                checked += 1
    assert checked == 1000


def test_latent_domain_from_source():
    code = "def f(x):\n    r1 = random.randint(1, 2)\n    r2 = random.randint(3, 5)\n    return x\n"
    assert verify.latent_domain_from_source(code) == [(1, 3), (1, 4), (1, 5), (2, 3), (2, 4), (2, 5)]
    with pytest.raises(verify.VerifyError, match="no random.randint"):
        verify.latent_domain_from_source("def f(x):\n    return x\n")
    with pytest.raises(verify.VerifyError, match="integer constants"):
        verify.latent_domain_from_source("def f(x):\n    r = random.randint(1, x)\n    return r\n")


@pytest.mark.parametrize("text,expected", [
    ("{3, 1, 1}", {1, 3}),
    ("{ 1,3 }", {1, 3}),
    ("The possible values are {4}.", {4}),
    ("Let me think: r could be 2 or 5, giving {7, 0} ... final answer: {0, 7}", {0, 7}),
    ("[2, 5, 2]", {2, 5}),
    ("The answer is 4", {4}),
    ("answer: -2, 4", {-2, 4}),
    ("{-1, 3}", {-1, 3}),
    ("{}", set()),
    ("set()", set()),
    ("none", set()),
    ("<think>maybe {9}</think>\n{1, 2}", {1, 2}),
    ("2 5 6", {2, 5, 6}),  # the compact model's format
    ("12 36 => 0", {0}),  # ... with an execution trace
    ("-3 4 => 1 5", {1, 5}),
])
def test_parse_answer(text, expected):
    assert verify.parse_answer(text) == frozenset(expected)


def test_parse_unreadable():
    assert verify.parse_answer("") is None and verify.parse_answer(None) is None
    assert verify.parse_answer("I do not know") is None


def test_scores_hand_examples():
    assert verify.exact_match({1, 3}, (3, 1)) == 1.0
    assert verify.exact_match({1}, (1, 3)) == 0.0
    assert verify.exact_match(None, (1,)) == 0.0
    assert math.isclose(verify.set_f1({1}, (1, 3)), 2 / 3)  # P = 1, R = 1/2
    assert math.isclose(verify.set_f1({1, 2, 4}, (1, 3)), 0.4)  # P = 1/3, R = 1/2 -> 2PR/(P+R) = 0.4
    assert verify.set_f1(set(), ()) == 1.0 and verify.set_f1(set(), (1,)) == 0.0 and verify.set_f1(None, (1,)) == 0.0
    s = verify.score([{1}, None, {2, 3}], [(1,), (2,), (3,)])
    assert s["em"] == pytest.approx(1 / 3) and s["unparsed"] == pytest.approx(1 / 3)
    assert s["f1"] == pytest.approx((1 + 0 + 2 / 3) / 3)
    with pytest.raises(ValueError, match="expected equal numbers"):
        verify.score([{1}], [])
