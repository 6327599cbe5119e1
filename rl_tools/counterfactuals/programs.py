"""Programs with hidden latents: a tiny statement tree, its interpreter, and two renderings.

A program is `f(x)` that draws its latents once (`r = random.randint(lo, hi)`), runs straight-line code,
if/elif/else, while and for loops over one integer variable `y`, and returns `expr % m`. The same tree is
rendered as Python source (what the benchmark ships and the sandbox executes) and as a compact
space-separated token string (what the from-scratch model reads). The interpreter here is the generator's
fast path; the verifier checks it against the rendered Python run in the sandbox (two implementations).

Integer semantics are Python's: `%` floors (the result has the sign of the modulus), `//` floors.
"""

from __future__ import annotations

import dataclasses

# --- expressions ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Var:
    name: str  # "x", "y", "i", "r", "r1", "r2", ...


@dataclasses.dataclass(frozen=True)
class Const:
    value: int


@dataclasses.dataclass(frozen=True)
class Bin:
    op: str  # "+", "-", "*", "%", "//"
    left: Expr
    right: Expr


Expr = Var | Const | Bin


@dataclasses.dataclass(frozen=True)
class Cmp:
    op: str  # ">", "<", ">=", "<=", "==", "!="
    left: Expr
    right: Expr


# --- statements ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Assign:
    expr: Expr  # y = expr


@dataclasses.dataclass(frozen=True)
class If:
    cond: Cmp
    then: tuple
    elifs: tuple = ()  # ((Cmp, block), ...)
    orelse: tuple = ()


@dataclasses.dataclass(frozen=True)
class While:
    cond: Cmp
    body: tuple


@dataclasses.dataclass(frozen=True)
class For:
    count: Expr  # for i in range(count)
    body: tuple


Stmt = Assign | If | While | For


@dataclasses.dataclass(frozen=True)
class Program:
    """`latents`: ((name, lo, hi), ...) drawn in order by `random.randint(lo, hi)`; `body` sets y;
    the result is `ret % modulus`."""

    latents: tuple
    body: tuple
    ret: Expr
    modulus: int
    names: tuple = ("x", "y")  # surface names of the input and the working variable in the Python rendering only

    @property
    def latent_names(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self.latents)


OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "%": lambda a, b: a % b,
    "//": lambda a, b: a // b,
}
CMPS = {
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}
MAX_LOOP_STEPS = 200  # the generator only emits loops that end well before this


class LoopLimitError(RuntimeError):
    pass


# --- interpreter ---------------------------------------------------------------------------------


def _eval(e: Expr, env: dict) -> int:
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e.name]
    return OPS[e.op](_eval(e.left, env), _eval(e.right, env))


def _test(c: Cmp, env: dict) -> bool:
    return CMPS[c.op](_eval(c.left, env), _eval(c.right, env))


def _exec(block: tuple, env: dict, budget: list, out: list[str] | None = None) -> None:
    """Run `block` on `env`; with `out`, also write the step trace (`step_trace`'s words) into it."""
    def value(e: Expr) -> int:
        return _eval(e, env) if out is None else _step_expr(e, env, out)

    def holds(c: Cmp) -> bool:
        return _test(c, env) if out is None else _step_test(c, env, out)

    for s in block:
        if isinstance(s, Assign):
            env["y"] = value(s.expr)
            if "trace" in env:
                env["trace"].append(env["y"])
            if out is not None:
                out += ([] if isinstance(s.expr, Bin) else [str(env["y"])]) + [";"]
        elif isinstance(s, If):
            if holds(s.cond):
                _exec(s.then, env, budget, out)
            else:
                for cond, blk in s.elifs:
                    if holds(cond):
                        _exec(blk, env, budget, out)
                        break
                else:
                    _exec(s.orelse, env, budget, out)
        elif isinstance(s, While):
            while holds(s.cond):
                budget[0] -= 1
                if budget[0] < 0:
                    raise LoopLimitError(f"loop ran past {MAX_LOOP_STEPS} iterations")
                _exec(s.body, env, budget, out)
        elif isinstance(s, For):
            n = value(s.count)
            saved = env.get("i")
            for i in range(n):
                budget[0] -= 1
                if budget[0] < 0:
                    raise LoopLimitError(f"loop ran past {MAX_LOOP_STEPS} iterations")
                env["i"] = i
                if out is not None:
                    out += ["i", str(i)]
                _exec(s.body, env, budget, out)
            if saved is not None:
                env["i"] = saved
        else:  # pragma: no cover - closed set of node types
            raise TypeError(f"statement {s!r}: expected Assign, If, While or For")


def _bind(program: Program, x: int, latents: tuple[int, ...]) -> dict:
    """The starting environment: x, y = x and the latents by name (checked against the program's)."""
    if len(latents) != len(program.latents):
        raise ValueError(f"latents={latents}: expected {len(program.latents)} values "
                         f"for {program.latent_names}")
    env = {"x": int(x), "y": int(x)}
    env.update(zip(program.latent_names, (int(v) for v in latents)))
    return env


def run(program: Program, x: int, latents: tuple[int, ...]) -> int:
    """f(x) with the latents fixed to `latents` (one value per latent, in draw order)."""
    env = _bind(program, x, latents)
    _exec(program.body, env, [MAX_LOOP_STEPS])
    return _eval(program.ret, env) % program.modulus


def run_trace(program: Program, x: int, latents: tuple[int, ...]) -> tuple[list[int], int, int]:
    """(y after every executed assignment, the return expression before `% m`, the result)."""
    env = {**_bind(program, x, latents), "trace": []}
    _exec(program.body, env, [MAX_LOOP_STEPS])
    pre = _eval(program.ret, env)
    return env["trace"], pre, pre % program.modulus


def _step_expr(e: Expr, env: dict, out: list[str]) -> int:
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e.name]
    a, b = _step_expr(e.left, env, out), _step_expr(e.right, env, out)
    c = OPS[e.op](a, b)
    out += [e.op, str(a), str(b), str(c)]
    return c


def _step_test(c: Cmp, env: dict, out: list[str]) -> bool:
    a, b = _step_expr(c.left, env, out), _step_expr(c.right, env, out)
    t = CMPS[c.op](a, b)
    out += [c.op, str(a), str(b), "T" if t else "F"]
    return t


def step_trace(program: Program, x: int, latents: tuple[int, ...]) -> list[str]:
    """Execution one operation at a time, in the compact words: every binary operation as `op a b result`
    (operands evaluated first, left to right), every test as `cmp a b T|F`, `;` after each assignment (a
    plain copy `y= x` writes its value first), `i k` at the start of each for-loop iteration, then the return
    expression's operations and `mod value m`. Each result depends only on the three words before it, so a
    small model learns execution as local steps (the answer `value % m` follows)."""
    env = _bind(program, x, latents)
    out: list[str] = []
    _exec(program.body, env, [MAX_LOOP_STEPS], out)
    pre = _step_expr(program.ret, env, out)
    if not isinstance(program.ret, Bin):
        out.append(str(pre))
    return out + ["mod", str(pre), str(program.modulus)]


# --- control-flow rendering (the small model's "flow" prompts) -------------------------------------

MAX_FLOW_NODES = 32  # labels n0..n31 / g0..g31 in the compact vocabulary


def flow_nodes(program: Program) -> list[list]:
    """The program compiled to a labelled control-flow graph, nodes in program order:
    `["y=", expr, next]`, `["i=", expr, next]`, `["if", cmp, next_if_true, next_if_false]`, `["ret", expr]`.
    if/elif/else become chains of tests; `while c` a test whose true edge enters the body and whose body
    returns to it; `for i in range(n)` becomes `i = 0`, a test `i < n`, the body and `i = i + 1` (the
    templates' loop counts do not change inside the loop, so testing `i < n` each time is the same loop)."""
    nodes: list[list] = []

    def new(*node) -> int:
        nodes.append(list(node))
        return len(nodes) - 1

    def patch(dangling, target):
        for n, slot in dangling:
            nodes[n][slot] = target

    def block(stmts) -> tuple[int | None, list]:
        entry, dangling = None, []
        for st in stmts:
            e, d = stmt(st)
            entry = e if entry is None else entry
            patch(dangling, e)
            dangling = d
        return entry, dangling

    def branch(test: int, stmts) -> list:
        e, d = block(stmts)
        if e is None:
            return [(test, 2)]
        nodes[test][2] = e
        return d

    def stmt(st) -> tuple[int, list]:
        if isinstance(st, Assign):
            k = new("y=", st.expr, None)
            return k, [(k, 2)]
        if isinstance(st, If):
            first = new("if", st.cond, None, None)
            exits = branch(first, st.then)
            false_edge = (first, 3)
            for cond, blk in st.elifs:
                k = new("if", cond, None, None)
                patch([false_edge], k)
                exits += branch(k, blk)
                false_edge = (k, 3)
            e, d = block(st.orelse)
            if e is None:
                exits.append(false_edge)
            else:
                patch([false_edge], e)
                exits += d
            return first, exits
        if isinstance(st, While):
            k = new("if", st.cond, None, None)
            patch(branch(k, st.body), k)
            return k, [(k, 3)]
        if isinstance(st, For):
            init = new("i=", Const(0), None)
            test = new("if", Cmp("<", Var("i"), st.count), None, None)
            nodes[init][2] = test
            body_exits = branch(test, st.body)
            inc = new("i=", Bin("+", Var("i"), Const(1)), test)
            patch(body_exits, inc)
            if nodes[test][2] is None:
                nodes[test][2] = inc
            return init, [(test, 3)]
        raise TypeError(f"statement {st!r}: expected Assign, If, While or For")  # pragma: no cover

    _, dangling = block(program.body)
    patch(dangling, new("ret", program.ret))
    if len(nodes) > MAX_FLOW_NODES:
        raise ValueError(f"program with {len(nodes)} flow nodes: expected at most {MAX_FLOW_NODES}")
    return nodes


def to_flow_tokens(program: Program) -> list[str]:
    """The control-flow rendering: latents, `|`, then per node its label `nK` and `y= expr gN`,
    `i= expr gN`, `if cmp gT gF` or `ret expr mod m` (`gN`: the label of the next node)."""
    out: list[str] = []
    for lname, lo, hi in program.latents:
        out += [lname, str(lo), str(hi)]
    out.append("|")
    for k, node in enumerate(flow_nodes(program)):
        out.append(f"n{k}")
        if node[0] == "if":
            out += ["if", *_tok_cond(node[1]), f"g{node[2]}", f"g{node[3]}"]
        elif node[0] == "ret":
            out += ["ret", *_tok_expr(node[1]), "mod", str(program.modulus)]
        else:
            out += [node[0], *_tok_expr(node[1]), f"g{node[2]}"]
    return out


def flow_trace(program: Program, x: int, latents: tuple[int, ...]) -> list[str]:
    """Execution of the control-flow graph, one node at a time: its label, every binary operation as
    `op a b result`, an assignment's new value (a plain copy writes it; otherwise the last result is it),
    a test's `cmp a b T|F`; ends with the return's operations and `mod value m`."""
    env = _bind(program, x, latents)
    nodes = flow_nodes(program)
    out: list[str] = []
    k, budget = 0, 4 * MAX_LOOP_STEPS + len(nodes)
    while nodes[k][0] != "ret":
        budget -= 1
        if budget < 0:
            raise LoopLimitError(f"flow graph ran past {4 * MAX_LOOP_STEPS + len(nodes)} nodes")
        node = nodes[k]
        out.append(f"n{k}")
        if node[0] == "if":
            k = node[2] if _step_test(node[1], env, out) else node[3]
        else:
            v = _step_expr(node[1], env, out)
            if not isinstance(node[1], Bin):
                out.append(str(v))
            env["y" if node[0] == "y=" else "i"] = v
            k = node[2]
    out.append(f"n{k}")
    pre = _step_expr(nodes[k][1], env, out)
    if not isinstance(nodes[k][1], Bin):
        out.append(str(pre))
    return out + ["mod", str(pre), str(program.modulus)]


def latent_domain(program: Program) -> list[tuple[int, ...]]:
    """Every joint latent value, in lexicographic order."""
    out: list[tuple[int, ...]] = [()]
    for _, lo, hi in program.latents:
        out = [t + (v,) for t in out for v in range(lo, hi + 1)]
    return out


# --- Python rendering ----------------------------------------------------------------------------

_PREC = {"+": 1, "-": 1, "*": 2, "//": 2, "%": 2}


def _py_expr(e: Expr, nm: dict, parent: int = 0, right: bool = False) -> str:
    if isinstance(e, Const):
        return str(e.value) if e.value >= 0 else f"({e.value})"
    if isinstance(e, Var):
        return nm.get(e.name, e.name)
    p = _PREC[e.op]
    text = f"{_py_expr(e.left, nm, p)} {e.op} {_py_expr(e.right, nm, p, True)}"
    return f"({text})" if p < parent or (right and p == parent) else text


def _py_cond(c: Cmp, nm: dict) -> str:
    return f"{_py_expr(c.left, nm)} {c.op} {_py_expr(c.right, nm)}"


def _py_block(block: tuple, indent: int, nm: dict) -> list[str]:
    pad = "    " * indent
    lines: list[str] = []
    for s in block:
        if isinstance(s, Assign):
            lines.append(f"{pad}{nm['y']} = {_py_expr(s.expr, nm)}")
        elif isinstance(s, If):
            lines.append(f"{pad}if {_py_cond(s.cond, nm)}:")
            lines += _py_block(s.then, indent + 1, nm) or [f"{pad}    pass"]
            for cond, blk in s.elifs:
                lines.append(f"{pad}elif {_py_cond(cond, nm)}:")
                lines += _py_block(blk, indent + 1, nm) or [f"{pad}    pass"]
            if s.orelse:
                lines.append(f"{pad}else:")
                lines += _py_block(s.orelse, indent + 1, nm)
        elif isinstance(s, While):
            lines.append(f"{pad}while {_py_cond(s.cond, nm)}:")
            lines += _py_block(s.body, indent + 1, nm) or [f"{pad}    pass"]
        elif isinstance(s, For):
            lines.append(f"{pad}for i in range({_py_expr(s.count, nm)}):")
            lines += _py_block(s.body, indent + 1, nm) or [f"{pad}    pass"]
    return lines


def to_python(program: Program, name: str = "f") -> str:
    """Python source of `def f(x)` (the input and working variable named by `program.names`); the latents
    come from the module-level `random` (seeded, hidden)."""
    nm = {"x": program.names[0], "y": program.names[1]}
    lines = [f"def {name}({nm['x']}):"]
    for lname, lo, hi in program.latents:
        lines.append(f"    {lname} = random.randint({lo}, {hi})")
    lines.append(f"    {nm['y']} = {nm['x']}")
    lines += _py_block(program.body, 1, nm)
    lines.append(f"    return ({_py_expr(program.ret, nm)}) % {program.modulus}")
    return "\n".join(lines) + "\n"


# --- compact token rendering ---------------------------------------------------------------------


def _tok_expr(e: Expr) -> list[str]:
    """Prefix (Polish) notation: no parentheses needed, short sequences."""
    if isinstance(e, Const):
        return [str(e.value)]
    if isinstance(e, Var):
        return [e.name]
    return [e.op, *_tok_expr(e.left), *_tok_expr(e.right)]


def _tok_cond(c: Cmp) -> list[str]:
    return [c.op, *_tok_expr(c.left), *_tok_expr(c.right)]


def _tok_block(block: tuple) -> list[str]:
    out: list[str] = []
    for s in block:
        if isinstance(s, Assign):
            out += ["y=", *_tok_expr(s.expr), ";"]
        elif isinstance(s, If):
            out += ["if", *_tok_cond(s.cond), "{", *_tok_block(s.then), "}"]
            for cond, blk in s.elifs:
                out += ["elif", *_tok_cond(cond), "{", *_tok_block(blk), "}"]
            if s.orelse:
                out += ["else", "{", *_tok_block(s.orelse), "}"]
        elif isinstance(s, While):
            out += ["while", *_tok_cond(s.cond), "{", *_tok_block(s.body), "}"]
        elif isinstance(s, For):
            out += ["for", *_tok_expr(s.count), "{", *_tok_block(s.body), "}"]
    return out


def to_tokens(program: Program) -> list[str]:
    """Compact rendering, e.g. `r 1 9 | if > y r { y= * y 3 ; } else { y= + y 4 ; } ret % y 7`."""
    out: list[str] = []
    for lname, lo, hi in program.latents:
        out += [lname, str(lo), str(hi)]
    out.append("|")
    out += _tok_block(program.body)
    out += ["ret", *_tok_expr(program.ret), "mod", str(program.modulus)]
    return out


def canonical(program: Program) -> str:
    """The program up to surface names (the compact rendering): the unit of the train/test split."""
    return " ".join(to_tokens(program))


def skeleton(program: Program) -> str:
    """The structure with every constant blanked: used for template ids and train/OOD separation checks."""
    return " ".join("C" if t.lstrip("-").isdigit() else t for t in to_tokens(program))
