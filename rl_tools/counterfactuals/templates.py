"""Program templates: three placeholder levels (fixed, structural, values), grouped by split family.

- fixed: the function name, the seeded latent draw `r = random.randint(lo, hi)`, `return (...) % m`;
- structural: each template fixes the preprocessing step, the main if/elif/else (or loop), the branch
  bodies and the return shape;
- values: operators' constants, thresholds and moduli are drawn per item (`Knobs` scales their ranges).

The `if_else` family (8 templates) is the training / in-distribution family; `if_else_long` (nesting),
`while` (loops), `multi_r` (three latents, for-loops) and `math` (word problems over small causal graphs)
are out-of-distribution families whose templates share no skeleton with the training family (a test checks).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from rl_tools.counterfactuals.programs import Assign, Bin, Cmp, Const, For, If, Program, Var, While

X, Y, R, I = Var("x"), Var("y"), Var("r"), Var("i")
R1, R2, R3 = Var("r1"), Var("r2"), Var("r3")


def C(v: int) -> Const:
    return Const(v)


def add(a, b):
    return Bin("+", a, b)


def sub(a, b):
    return Bin("-", a, b)


def mul(a, b):
    return Bin("*", a, b)


def mod(a, b):
    return Bin("%", a, b)


def gt(a, b):
    return Cmp(">", a, b)


def lt(a, b):
    return Cmp("<", a, b)


def ge(a, b):
    return Cmp(">=", a, b)


def eq(a, b):
    return Cmp("==", a, b)


@dataclasses.dataclass(frozen=True)
class Knobs:
    """Difficulty knobs of one level: latent range, input range, constants, moduli."""

    r_hi: int
    x_hi: int
    c_hi: int
    m_lo: int
    m_hi: int
    multi_r_hi: int


LEVELS = {
    1: Knobs(r_hi=5, x_hi=9, c_hi=3, m_lo=3, m_hi=5, multi_r_hi=3),
    2: Knobs(r_hi=7, x_hi=12, c_hi=4, m_lo=4, m_hi=7, multi_r_hi=4),
    3: Knobs(r_hi=9, x_hi=15, c_hi=5, m_lo=5, m_hi=9, multi_r_hi=5),
}


@dataclasses.dataclass(frozen=True)
class Template:
    id: str
    family: str
    build: Callable[[random.Random, Knobs], Program]
    story: Callable[..., str] | None = None  # math word problems: (program, knobs-free values) -> text
    x_lo: int = 0


def _c(rng: random.Random, k: Knobs, lo: int = 1) -> int:
    return rng.randint(lo, k.c_hi)


def _m(rng: random.Random, k: Knobs) -> int:
    return rng.randint(k.m_lo, k.m_hi)


def _r(k: Knobs) -> tuple:
    return (("r", 1, k.r_hi),)


# --- if_else: <= 1 nesting level (train + in-distribution test) ------------------------------------

def _ie1(rng, k):
    return Program(_r(k), (If(gt(Y, R), (Assign(mul(Y, C(_c(rng, k, 2)))),), (), (Assign(add(Y, C(_c(rng, k)))),)),),
                   Y, _m(rng, k))


def _ie2(rng, k):
    return Program(_r(k), (Assign(add(X, C(_c(rng, k)))),
                           If(gt(Y, R), (Assign(sub(Y, R)),), (), (Assign(mul(Y, C(_c(rng, k, 2)))),))), Y, _m(rng, k))


def _ie3(rng, k):
    return Program(_r(k), (If(gt(Y, R), (Assign(add(Y, mul(C(_c(rng, k, 2)), R))),),
                              ((eq(Y, R), (Assign(C(_c(rng, k))),)),),
                              (Assign(mul(Y, C(_c(rng, k, 2)))),)),), Y, _m(rng, k))


def _ie4(rng, k):
    return Program(_r(k), (Assign(mul(X, C(_c(rng, k, 2)))),
                           If(lt(Y, add(R, C(_c(rng, k)))), (Assign(add(Y, R)),), (),
                              (Assign(sub(Y, C(_c(rng, k)))),))), add(Y, R), _m(rng, k))


def _ie5(rng, k):
    return Program(_r(k), (If(ge(Y, R), (Assign(sub(mul(Y, C(_c(rng, k, 2))), R)),), (),
                              (Assign(add(Y, C(_c(rng, k)))),)),), Y, _m(rng, k))


def _ie6(rng, k):
    a = _c(rng, k)
    return Program(_r(k), (Assign(sub(X, C(a))),
                           If(gt(Y, R), (Assign(mul(Y, C(_c(rng, k, 2)))),),
                              ((gt(Y, C(0)), (Assign(add(Y, R)),)),),
                              (Assign(sub(Y, C(_c(rng, k)))),))), Y, _m(rng, k))


def _ie7(rng, k):
    return Program(_r(k), (If(gt(mul(Y, C(_c(rng, k, 2))), add(R, C(_c(rng, k)))), (Assign(add(Y, R)),), (),
                              (Assign(mul(Y, C(_c(rng, k, 2)))),)),), Y, _m(rng, k))


def _ie8(rng, k):
    return Program(_r(k), (Assign(add(X, R)),
                           If(gt(Y, C(rng.randint(3, 3 + k.r_hi))), (Assign(sub(Y, C(_c(rng, k)))),), (),
                              (Assign(mul(Y, C(_c(rng, k, 2)))),))), mul(Y, C(_c(rng, k, 2))), _m(rng, k))


# --- if_else_long: deeper nesting (OOD) --------------------------------------------------------------

def _long1(rng, k):
    return Program(_r(k), (If(gt(Y, R),
                              (If(gt(Y, add(R, C(_c(rng, k)))), (Assign(mul(Y, C(_c(rng, k, 2)))),), (),
                                  (Assign(add(Y, C(_c(rng, k)))),)),), (),
                              (If(lt(Y, C(_c(rng, k))), (Assign(add(Y, R)),), (),
                                  (Assign(sub(Y, C(_c(rng, k)))),)),)),), Y, _m(rng, k))


def _long2(rng, k):
    inner = If(eq(mod(Y, C(2)), C(0)), (Assign(mul(Y, R)),), (), (Assign(add(Y, R)),))
    return Program(_r(k), (Assign(add(X, C(_c(rng, k)))),
                           If(gt(Y, R), (Assign(sub(Y, C(_c(rng, k)))),
                                         If(gt(Y, C(_c(rng, k))), (inner,), (), (Assign(mul(Y, C(_c(rng, k, 2)))),))),
                              (), (Assign(add(Y, C(_c(rng, k)))),))), Y, _m(rng, k))


def _long3(rng, k):
    b = _c(rng, k)
    return Program(_r(k), (If(lt(Y, R),
                              (Assign(mul(Y, C(_c(rng, k, 2)))),
                               If(gt(Y, C(b)), (Assign(sub(Y, R)),), ((eq(Y, C(b)), (Assign(C(_c(rng, k))),)),),
                                  (Assign(add(Y, R)),))),
                              ((eq(Y, R), (Assign(C(_c(rng, k))),)),),
                              (If(gt(Y, add(R, C(_c(rng, k)))), (Assign(mul(Y, C(2))),), (),
                                  (Assign(add(Y, C(1))),)),)),), add(Y, R), _m(rng, k))


# --- while: loops (OOD) -------------------------------------------------------------------------------

def _while1(rng, k):
    return Program(_r(k), (While(lt(Y, C(rng.randint(10, 20))), (Assign(add(Y, add(R, C(_c(rng, k))))),)),),
                   Y, _m(rng, k))


def _while2(rng, k):
    return Program(_r(k), (Assign(add(X, C(_c(rng, k)))),
                           While(lt(Y, C(rng.randint(15, 30))), (Assign(add(mul(Y, C(2)), R)),))),
                   add(Y, R), _m(rng, k))


def _while3(rng, k):
    return Program(_r(k), (While(gt(Y, R), (Assign(sub(Y, C(_c(rng, k)))),)),
                           Assign(mul(Y, C(_c(rng, k, 2))))), Y, _m(rng, k))


def _while4(rng, k):
    return Program(_r(k), (While(lt(Y, C(rng.randint(10, 20))),
                                 (If(eq(mod(Y, C(2)), C(0)), (Assign(add(Y, R)),), (),
                                     (Assign(add(Y, C(_c(rng, k)))),)),)),), Y, _m(rng, k))


# --- multi_r: three latents and for-loops (OOD) -----------------------------------------------------

def _mr(k: Knobs) -> tuple:
    return tuple((n, 1, k.multi_r_hi) for n in ("r1", "r2", "r3"))


def _multi1(rng, k):
    return Program(_mr(k), (For(R1, (Assign(add(Y, R2)),)),
                            If(gt(Y, mul(R3, C(_c(rng, k, 2)))), (Assign(sub(Y, C(_c(rng, k)))),), (), ())),
                   Y, _m(rng, k))


def _multi2(rng, k):
    return Program(_mr(k), (Assign(mul(X, R1)), For(C(_c(rng, k, 2)), (Assign(add(Y, mul(I, R2))),))),
                   add(Y, R3), _m(rng, k))


def _multi3(rng, k):
    return Program(_mr(k), (For(R1, (If(gt(Y, R2), (Assign(sub(Y, R3)),), (), (Assign(add(Y, C(_c(rng, k)))),)),)),),
                   Y, _m(rng, k))


# --- math: counterfactual word problems over small causal graphs (OOD domain) ----------------------

def _gsm1(rng, k):  # trays x, cookies per tray r -> cookies -> eaten a -> boxes of m -> loose
    a = rng.randint(0, 1)
    return Program((("r", 2, k.r_hi + 1),), (Assign(sub(mul(X, R), C(a))),), Y, _m(rng, k))


def _story1(p: Program) -> str:
    (_, lo, hi), = p.latents
    a = p.body[0].expr.right.value
    eat = f" She eats {a} cookie." if a else ""
    return (f"A baker fills x trays every morning. Each tray holds r cookies, where r is the same every day: "
            f"a whole number from {lo} to {hi} that you are not told.{eat} She packs the cookies into boxes of "
            f"{p.modulus}; the answer is the number of cookies left over, not in a full box.")


def _gsm2(rng, k):  # start x, gain r per round for 3 rounds, bonus if above threshold t
    t = rng.randint(8, 16)
    b = _c(rng, k)
    return Program(_r(k), (Assign(add(X, mul(C(3), R))), If(gt(Y, C(t)), (Assign(add(Y, C(b))),), (), ())),
                   Y, _m(rng, k))


def _story2(p: Program) -> str:
    (_, lo, hi), = p.latents
    t, b = p.body[1].cond.right.value, p.body[1].then[0].expr.right.value
    return (f"A player starts a game with x points and plays 3 rounds, earning r points per round; r was fixed by "
            f"a hidden die before the game, a whole number from {lo} to {hi}. If the player then has more than "
            f"{t} points, a bonus of {b} points is added. The scoreboard wraps around: it shows the points "
            f"modulo {p.modulus}. The answer is what the scoreboard shows.")


def _gsm3(rng, k):  # x liters; if x > r (hidden capacity) the overflow valve drains half the excess
    c = _c(rng, k, 2)
    return Program(_r(k), (If(gt(Y, R), (Assign(add(R, mul(C(c), sub(Y, R)))),), (), (Assign(add(Y, C(c))),)),),
                   Y, _m(rng, k))


def _story3(p: Program) -> str:
    (_, lo, hi), = p.latents
    c = p.body[0].orelse[0].expr.right.value
    return (f"A machine receives x liters of water. It has a hidden set point r (the same for every run, a whole "
            f"number from {lo} to {hi}). If x is above r, it outputs r plus {c} times the excess x - r; "
            f"otherwise it outputs x + {c}. The output is poured into jugs of {p.modulus} liters, and the answer "
            f"is the liters left over.")


TEMPLATES: tuple[Template, ...] = (
    *(Template(f"if_else/T{i}", "if_else", f) for i, f in enumerate(
        (_ie1, _ie2, _ie3, _ie4, _ie5, _ie6, _ie7, _ie8), start=1)),
    *(Template(f"if_else_long/L{i}", "if_else_long", f) for i, f in enumerate((_long1, _long2, _long3), start=1)),
    *(Template(f"while/W{i}", "while", f) for i, f in enumerate((_while1, _while2, _while3, _while4), start=1)),
    *(Template(f"multi_r/M{i}", "multi_r", f) for i, f in enumerate((_multi1, _multi2, _multi3), start=1)),
    Template("math/G1", "math", _gsm1, _story1, x_lo=1),
    Template("math/G2", "math", _gsm2, _story2),
    Template("math/G3", "math", _gsm3, _story3),
)

FAMILIES = ("if_else", "if_else_long", "while", "multi_r", "math")


def templates_of(family: str) -> tuple[Template, ...]:
    if family not in FAMILIES:
        raise ValueError(f"family={family!r}: expected one of {FAMILIES}")
    return tuple(t for t in TEMPLATES if t.family == family)
