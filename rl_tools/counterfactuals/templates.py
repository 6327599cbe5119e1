"""Program templates: three placeholder levels (fixed, structural, values), grouped by split family.

- fixed: the function name, the seeded latent draw `r = random.randint(lo, hi)`, `return (...) % m`;
- structural: each template fixes its skeleton's slots (preprocessing, the main if/elif/else or loop, the
  condition's operands, the return slot); per program it draws the comparison operators, the branch bodies
  (operator and shape of each assignment) and their lengths, the number of elif branches, the return shape
  and the variable names of the Python rendering;
- values: constants, thresholds and moduli are drawn per item (`Knobs` scales their ranges).

The `if_else` family (8 templates) is the training / in-distribution family; `if_else_long` (nesting),
`while` (loops), `multi_r` (three latents, for-loops) and `math` (6 word problems over small causal graphs)
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


# --- structural placeholders: drawn per program ----------------------------------------------------

CMP_OPS = (">", ">=", "<", "<=")
X_NAMES = ("x", "n", "a", "v", "k", "inp")
Y_NAMES = ("y", "z", "t", "acc", "s", "w", "val", "out")


def _cmp(rng: random.Random, a, b) -> Cmp:
    return Cmp(rng.choice(CMP_OPS), a, b)


def _expr(rng: random.Random, k: Knobs, r=R, use_r: bool = True):
    """A branch body's right-hand side over y, a latent and constants (operator and shape drawn)."""
    c, c2 = _c(rng, k), _c(rng, k, 2)
    forms = [lambda: add(Y, C(c)), lambda: sub(Y, C(c)), lambda: mul(Y, C(c2))]
    if use_r:
        forms += [lambda: add(Y, r), lambda: sub(Y, r), lambda: mul(Y, r), lambda: add(mul(Y, C(c2)), r),
                  lambda: sub(mul(Y, C(c2)), r), lambda: add(Y, mul(C(c2), r)), lambda: sub(add(Y, C(c)), r)]
    return rng.choice(forms)()


def _block(rng: random.Random, k: Knobs, r=R, use_r: bool = True, max_len: int = 2) -> tuple:
    """A branch body of 1..max_len assignments (the branch length is drawn)."""
    return tuple(Assign(_expr(rng, k, r, use_r)) for _ in range(rng.randint(1, max_len)))


def _ret(rng: random.Random, k: Knobs, r=R):
    """The return shape (before `% m`)."""
    c, c2 = _c(rng, k), _c(rng, k, 2)
    return rng.choice((lambda: Y, lambda: Y, lambda: add(Y, r), lambda: add(Y, C(c)), lambda: mul(Y, C(c2)),
                       lambda: sub(Y, r)))()


def _pre(rng: random.Random, k: Knobs):
    """A preprocessing assignment of x."""
    c, c2 = _c(rng, k), _c(rng, k, 2)
    return Assign(rng.choice((lambda: add(X, C(c)), lambda: sub(X, C(c)), lambda: mul(X, C(c2)),
                              lambda: add(X, R), lambda: sub(X, R)))())


def _names(rng: random.Random) -> tuple[str, str]:
    return (rng.choice(X_NAMES), rng.choice(Y_NAMES))


def _prog(rng, latents, body, ret, k, names=True) -> Program:
    return Program(latents, tuple(body), ret, _m(rng, k), _names(rng) if names else ("x", "y"))


def _elifs(rng, k, conds) -> tuple:
    """0..len(conds) elif branches (the branch count is drawn)."""
    return tuple((c, _block(rng, k)) for c in conds[:rng.randint(0, len(conds))])


# --- if_else: <= 1 nesting level, always an else (train + in-distribution test) ---------------------
# Each template fixes the skeleton's slots (preprocessing, the condition's operands, elif slots, return
# slot); the comparison operators, branch bodies and their lengths, elif count, return shape, constants,
# modulus and variable names are drawn.

def _ie1(rng, k):
    return _prog(rng, _r(k), (If(_cmp(rng, Y, R), _block(rng, k), (), _block(rng, k)),), _ret(rng, k), k)


def _ie2(rng, k):
    return _prog(rng, _r(k), (_pre(rng, k), If(_cmp(rng, Y, R), _block(rng, k), (), _block(rng, k))),
                 _ret(rng, k), k)


def _ie3(rng, k):
    elifs = ((eq(Y, R), _block(rng, k)),) + _elifs(rng, k, (_cmp(rng, Y, C(_c(rng, k))),))
    return _prog(rng, _r(k), (If(_cmp(rng, Y, R), _block(rng, k), elifs, _block(rng, k)),), _ret(rng, k), k)


def _ie4(rng, k):
    return _prog(rng, _r(k), (Assign(mul(X, C(_c(rng, k, 2)))),
                              If(_cmp(rng, Y, add(R, C(_c(rng, k)))), _block(rng, k), (), _block(rng, k))),
                 add(Y, R), k)


def _ie5(rng, k):
    t = rng.randint(1, k.x_hi)
    return _prog(rng, _r(k), (If(_cmp(rng, Y, C(t)), _block(rng, k), _elifs(rng, k, (_cmp(rng, Y, R),)),
                                 _block(rng, k)),), _ret(rng, k), k)


def _ie6(rng, k):
    return _prog(rng, _r(k), (Assign(sub(X, C(_c(rng, k)))),
                              If(_cmp(rng, Y, R), _block(rng, k),
                                 ((gt(Y, C(0)), _block(rng, k)),) + _elifs(rng, k, (lt(Y, C(-_c(rng, k))),)),
                                 _block(rng, k))), _ret(rng, k), k)


def _ie7(rng, k):
    return _prog(rng, _r(k), (If(_cmp(rng, mul(Y, C(_c(rng, k, 2))), add(R, C(_c(rng, k)))), _block(rng, k), (),
                                 _block(rng, k)),), _ret(rng, k), k)


def _ie8(rng, k):
    return _prog(rng, _r(k), (Assign(add(X, R)),
                              If(_cmp(rng, Y, C(rng.randint(3, 3 + k.r_hi))), _block(rng, k, use_r=False), (),
                                 _block(rng, k, use_r=False))), mul(Y, C(_c(rng, k, 2))), k)


# --- if_else_long: nested ifs (depth 2) and longer bodies (OOD) -----------------------------------------

def _long1(rng, k):
    inner1 = If(_cmp(rng, Y, add(R, C(_c(rng, k)))), _block(rng, k), (), _block(rng, k))
    inner2 = If(_cmp(rng, Y, C(_c(rng, k))), _block(rng, k), (), _block(rng, k))
    return _prog(rng, _r(k), (If(_cmp(rng, Y, R), (inner1,), (), (inner2,)),), _ret(rng, k), k)


def _long2(rng, k):
    inner = If(eq(mod(Y, C(2)), C(0)), _block(rng, k), (), _block(rng, k))
    return _prog(rng, _r(k), (_pre(rng, k),
                              If(_cmp(rng, Y, R), (*_block(rng, k), If(_cmp(rng, Y, C(_c(rng, k))), (inner,), (),
                                                                        _block(rng, k))),
                                 (), _block(rng, k))), _ret(rng, k), k)


def _long3(rng, k):
    b = _c(rng, k)
    return _prog(rng, _r(k), (If(_cmp(rng, Y, R),
                                 (*_block(rng, k), If(gt(Y, C(b)), _block(rng, k), ((eq(Y, C(b)), _block(rng, k)),),
                                                      _block(rng, k))),
                                 ((eq(Y, R), _block(rng, k)),),
                                 (If(_cmp(rng, Y, add(R, C(_c(rng, k)))), _block(rng, k), (), _block(rng, k)),)),
                              *_block(rng, k, max_len=1)), add(Y, R), k)


# --- while: loops (OOD); every loop body moves y monotonically towards the exit ------------------------

def _grow(rng, k, r=R):
    c = _c(rng, k)
    return rng.choice((lambda: add(Y, add(r, C(c))), lambda: add(Y, r), lambda: add(mul(Y, C(2)), r),
                       lambda: add(add(Y, r), r), lambda: add(Y, mul(C(_c(rng, k, 2)), r))))()


def _while1(rng, k):
    return _prog(rng, _r(k), (While(lt(Y, C(rng.randint(10, 20))), (Assign(_grow(rng, k)),)),), _ret(rng, k), k)


def _while2(rng, k):
    return _prog(rng, _r(k), (Assign(add(X, C(_c(rng, k)))),
                              While(Cmp(rng.choice(("<", "<=")), Y, C(rng.randint(15, 30))),
                                    (Assign(_grow(rng, k)),))), add(Y, R), k)


def _while3(rng, k):
    c = _c(rng, k)
    return _prog(rng, _r(k), (While(Cmp(rng.choice((">", ">=")), Y, R), (Assign(sub(Y, C(c))),)),
                              *_block(rng, k, max_len=1)), _ret(rng, k), k)


def _while4(rng, k):
    return _prog(rng, _r(k), (While(lt(Y, C(rng.randint(10, 20))),
                                    (If(eq(mod(Y, C(2)), C(0)), (Assign(_grow(rng, k)),), (),
                                        (Assign(add(Y, C(_c(rng, k)))),)),)),), _ret(rng, k), k)


# --- multi_r: three latents and for-loops (OOD) -----------------------------------------------------

def _mr(k: Knobs) -> tuple:
    return tuple((n, 1, k.multi_r_hi) for n in ("r1", "r2", "r3"))


def _multi1(rng, k):
    grow = rng.choice((add(Y, R2), add(Y, add(R2, C(1))), add(Y, mul(C(2), R2))))
    return _prog(rng, _mr(k), (For(R1, (Assign(grow),)),
                               If(_cmp(rng, Y, mul(R3, C(_c(rng, k, 2)))), _block(rng, k, r=R3), (), ())),
                 _ret(rng, k, R3), k)


def _multi2(rng, k):
    return _prog(rng, _mr(k), (Assign(rng.choice((mul(X, R1), add(X, R1), sub(X, R1)))),
                               For(C(_c(rng, k, 2)), (Assign(rng.choice((add(Y, mul(I, R2)), add(Y, add(I, R2)),
                                                                         sub(Y, mul(I, R2))))),))),
                 rng.choice((add(Y, R3), sub(Y, R3), mul(Y, R3))), k)


def _multi3(rng, k):
    return _prog(rng, _mr(k), (For(R1, (If(_cmp(rng, Y, R2), _block(rng, k, r=R3, max_len=1), (),
                                           _block(rng, k, use_r=False, max_len=1)),)),), _ret(rng, k, R2), k)


# --- math: counterfactual word problems over small causal graphs (OOD domain) ----------------------
# Each story fixes its program's structure (so the text can describe it); its quantities are drawn.

def _gsm1(rng, k):  # trays x, cookies per tray r -> cookies -> eaten a -> boxes of m -> loose
    a = rng.randint(0, k.c_hi)
    return Program((("r", 2, k.r_hi + 1),), (Assign(sub(mul(X, R), C(a))),), Y, _m(rng, k))


def _story1(p: Program) -> str:
    (_, lo, hi), = p.latents
    a = p.body[0].expr.right.value
    eat = f" She eats {a} cookie{'s' if a > 1 else ''}." if a else ""
    return (f"A baker fills x trays every morning. Each tray holds r cookies, where r is the same every day: "
            f"a whole number from {lo} to {hi} that you are not told.{eat} She packs the cookies into boxes of "
            f"{p.modulus}; the answer is the number of cookies left over, not in a full box.")


def _gsm2(rng, k):  # start x, gain r per round for n rounds, bonus if above threshold t
    n = rng.randint(2, 4)
    t = rng.randint(8, 16)
    b = _c(rng, k)
    return Program(_r(k), (Assign(add(X, mul(C(n), R))), If(gt(Y, C(t)), (Assign(add(Y, C(b))),), (), ())),
                   Y, _m(rng, k))


def _story2(p: Program) -> str:
    (_, lo, hi), = p.latents
    n = p.body[0].expr.right.left.value
    t, b = p.body[1].cond.right.value, p.body[1].then[0].expr.right.value
    return (f"A player starts a game with x points and plays {n} rounds, earning r points per round; r was fixed by "
            f"a hidden die before the game, a whole number from {lo} to {hi}. If the player then has more than "
            f"{t} points, a bonus of {b} points is added. The scoreboard wraps around: it shows the points "
            f"modulo {p.modulus}. The answer is what the scoreboard shows.")


def _gsm3(rng, k):  # x liters; above the hidden set point r the machine multiplies the excess by c
    c = _c(rng, k, 2)
    d = _c(rng, k)
    return Program(_r(k), (If(gt(Y, R), (Assign(add(R, mul(C(c), sub(Y, R)))),), (), (Assign(add(Y, C(d))),)),),
                   Y, _m(rng, k))


def _story3(p: Program) -> str:
    (_, lo, hi), = p.latents
    c = p.body[0].then[0].expr.right.left.value
    d = p.body[0].orelse[0].expr.right.value
    return (f"A machine receives x liters of water. It has a hidden set point r (the same for every run, a whole "
            f"number from {lo} to {hi}). If x is above r, it outputs r plus {c} times the excess x - r; "
            f"otherwise it outputs x + {d}. The output is poured into jugs of {p.modulus} liters, and the answer "
            f"is the liters left over.")


def _gsm4(rng, k):  # savings: x coins, r coins a week for w weeks, a fee f
    w = rng.randint(2, 5)
    f = rng.randint(1, k.c_hi + 2)
    return Program(_r(k), (Assign(sub(add(X, mul(C(w), R)), C(f))),), Y, _m(rng, k))


def _story4(p: Program) -> str:
    (_, lo, hi), = p.latents
    e = p.body[0].expr
    w, f = e.left.right.left.value, e.right.value
    return (f"A jar holds x coins. Every week for {w} weeks a child adds r coins, the same number each week (r is "
            f"a whole number from {lo} to {hi}, not told to you). Then a fee of {f} coins is taken out. The coins "
            f"are stacked in piles of {p.modulus}; the answer is the number of coins not in a full pile.")


def _gsm5(rng, k):  # a heater with hidden power r warms a room from x until it reaches t
    t = rng.randint(10, 20)
    return Program(_r(k), (While(lt(Y, C(t)), (Assign(add(Y, R)),)),), Y, _m(rng, k))


def _story5(p: Program) -> str:
    (_, lo, hi), = p.latents
    t = p.body[0].cond.right.value
    return (f"A room is at x degrees. A heater with a hidden power r (a whole number from {lo} to {hi}, the same "
            f"every time it runs) adds r degrees every hour, and it keeps running while the room is below {t} "
            f"degrees. The thermostat display shows the final temperature modulo {p.modulus}; the answer is what "
            f"it shows.")


def _gsm6(rng, k):  # a bus: x passengers, c get on at each of the first r stops, a crowd rule
    c = _c(rng, k)
    t = rng.randint(8, 18)
    d = _c(rng, k)
    return Program(_r(k), (For(R, (Assign(add(Y, C(c))),)), If(gt(Y, C(t)), (Assign(sub(Y, C(d))),), (), ())),
                   Y, _m(rng, k))


def _story6(p: Program) -> str:
    (_, lo, hi), = p.latents
    c = p.body[0].body[0].expr.right.value
    t, d = p.body[1].cond.right.value, p.body[1].then[0].expr.right.value
    return (f"A bus leaves with x passengers. At each of its first r stops {c} passenger{'s' if c > 1 else ''} "
            f"get on; r depends on a hidden route choice, a whole number from {lo} to {hi}. If more than {t} "
            f"passengers are then on board, {d} of them move to the next bus. Passengers sit in rows of "
            f"{p.modulus}; the answer is the number of passengers in the last, incomplete row.")


TEMPLATES: tuple[Template, ...] = (
    *(Template(f"if_else/T{i}", "if_else", f) for i, f in enumerate(
        (_ie1, _ie2, _ie3, _ie4, _ie5, _ie6, _ie7, _ie8), start=1)),
    *(Template(f"if_else_long/L{i}", "if_else_long", f) for i, f in enumerate((_long1, _long2, _long3), start=1)),
    *(Template(f"while/W{i}", "while", f) for i, f in enumerate((_while1, _while2, _while3, _while4), start=1)),
    *(Template(f"multi_r/M{i}", "multi_r", f) for i, f in enumerate((_multi1, _multi2, _multi3), start=1)),
    Template("math/G1", "math", _gsm1, _story1, x_lo=1),
    Template("math/G2", "math", _gsm2, _story2),
    Template("math/G3", "math", _gsm3, _story3),
    Template("math/G4", "math", _gsm4, _story4),
    Template("math/G5", "math", _gsm5, _story5),
    Template("math/G6", "math", _gsm6, _story6),
)

FAMILIES = ("if_else", "if_else_long", "while", "multi_r", "math")


def templates_of(family: str) -> tuple[Template, ...]:
    if family not in FAMILIES:
        raise ValueError(f"family={family!r}: expected one of {FAMILIES}")
    return tuple(t for t in TEMPLATES if t.family == family)
