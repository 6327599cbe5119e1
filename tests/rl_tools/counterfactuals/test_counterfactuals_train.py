"""The small-model experiment: tiny smoke run, sharded step on 8 fake devices, config errors."""

import json

import jax
import numpy as np
import pytest
from helpers import assert_trees_close

from core import config as config_lib
from core import sharding
from core import train as train_lib
from core.lm import losses
from core.lm import model as model_lib
from rl_tools.counterfactuals import EXPERIMENT as EXPERIMENTS
from rl_tools.counterfactuals import data, generate
from rl_tools.counterfactuals import train as cf_train
from rl_tools.counterfactuals.configs import CFConfig

EXPERIMENT = EXPERIMENTS[0]


def test_tiny_run_writes_metrics_and_plots(tmp_path):
    config = EXPERIMENT.presets["tiny"]
    metrics = EXPERIMENT.run(config, tmp_path)
    for split in cf_train.EVAL_SPLITS:
        for v in cf_train.EVAL_VARIANTS:
            assert 0.0 <= metrics[f"{split}/{v}_em"] <= 1.0
    assert np.isfinite(metrics["final_loss"])
    assert (tmp_path / "iv_vs_cf.png").exists() and (tmp_path / "loss.png").exists()
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["if_else/counterfactual_em"] == metrics["if_else/counterfactual_em"]
    rows = json.loads((tmp_path / "eval.json").read_text())["rows"]
    assert {r["n"] for r in rows} == {config.n_eval}


def test_tiny_flow_run_with_exec_families(tmp_path):
    import dataclasses
    config = dataclasses.replace(EXPERIMENT.presets["tiny"], trace=True, trace_style="flow", number_init="fourier",
                                 exec_families=("while",), n_exec=30, n_eval=8, seq_len=224)
    metrics = EXPERIMENT.run(config, tmp_path)
    assert np.isfinite(metrics["final_loss"]) and 0.0 <= metrics["while/interventional_em"] <= 1.0
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved["leakage"]["exec"]["while"]["program_overlap"] == 0.0
    item = generate.generate_split("while", 1, seed=0)[0][0]
    words = data.prompt_fn("flow")(item, "interventional").split()
    assert words[words.index("|") + 1] == "n0" and "{" not in words  # the graph, not the statement tree


def test_training_rows_mask_only_answers():
    tok = data.CompactTokenizer()
    items = generate.generate_split("if_else_train", 5, seed=0)[0]
    exs = data.examples(items, ("interventional",), tok)
    rows = data.to_rows(exs, 128)
    assert rows["loss_mask"].sum() == sum(len(a) for _, a in exs)
    prompt, answer = exs[0]
    assert tok.decode(answer) == " ".join(str(v) for v in items[0].answer_iv)
    assert "given" in tok.decode(prompt) and tok.unk_id not in prompt


def test_trace_examples_spell_out_execution():
    from rl_tools.counterfactuals import programs as P
    tok = data.CompactTokenizer()
    items = generate.generate_split("if_else_train", 50, seed=1)[0]
    exs = data.examples(items, ("factual", "interventional"), tok, trace=True)
    assert len(exs) >= 95  # only items whose trace leaves the number range are skipped
    it = items[0]
    ys, pre, out = P.run_trace(it.program, it.x1, it.r_true)
    assert out == P.run(it.program, it.x1, it.r_true) == it.answer_iv[0] and pre % it.program.modulus == out
    words = data.trace_words(it, "interventional")
    assert words == [str(v) for v in (*ys, pre)] + ["=>"]
    with pytest.raises(ValueError, match="counterfactual"):
        data.trace_words(it, "counterfactual")


def test_step_trace_hand_case():
    from rl_tools.counterfactuals import programs as P
    # y = x * 3 + r; if y > 20: y = y - r  (else nothing); return y % 4, at x = 6, r = 4
    prog = P.Program(latents=(("r", 1, 5),),
                     body=(P.Assign(P.Bin("+", P.Bin("*", P.Var("y"), P.Const(3)), P.Var("r"))),
                           P.If(P.Cmp(">", P.Var("y"), P.Const(20)),
                                then=(P.Assign(P.Bin("-", P.Var("y"), P.Var("r"))),))),
                     ret=P.Var("y"), modulus=4)
    assert P.step_trace(prog, 6, (4,)) == ["*", "6", "3", "18", "+", "18", "4", "22", ";",
                                           ">", "22", "20", "T", "-", "22", "4", "18", ";",
                                           "18", "mod", "18", "4"]
    assert P.step_trace(prog, 5, (1,))[4:] == ["+", "15", "1", "16", ";", ">", "16", "20", "F", "16", "mod",
                                               "16", "4"]
    assert P.run(prog, 6, (4,)) == 18 % 4
    for fn in (P.run, P.run_trace, P.step_trace, P.flow_trace):
        with pytest.raises(ValueError, match="expected 1 values"):
            fn(prog, 6, (4, 1))


def test_flow_rendering_hand_case():
    from rl_tools.counterfactuals import programs as P
    # for i in range(r1): if y <= r2: y = y + i  else: y = y - 1 ;  return y % 5
    prog = P.Program(latents=(("r1", 1, 3), ("r2", 1, 3)),
                     body=(P.For(P.Var("r1"), (P.If(P.Cmp("<=", P.Var("y"), P.Var("r2")),
                                                    then=(P.Assign(P.Bin("+", P.Var("y"), P.Var("i"))),),
                                                    orelse=(P.Assign(P.Bin("-", P.Var("y"), P.Const(1))),)),)),),
                     ret=P.Var("y"), modulus=5)
    assert " ".join(P.to_flow_tokens(prog)) == (
        "r1 1 3 r2 1 3 | n0 i= 0 g1 n1 if < i r1 g2 g6 n2 if <= y r2 g3 g4 n3 y= + y i g5 n4 y= - y 1 g5 "
        "n5 i= + i 1 g1 n6 ret y mod 5")
    # x = 1, r1 = 2, r2 = 1: i = 0: 1 <= 1 -> y = 1; i = 1: 1 <= 1 -> y = 2; return 2
    assert " ".join(P.flow_trace(prog, 1, (2, 1))) == (
        "n0 0 n1 < 0 2 T n2 <= 1 1 T n3 + 1 0 1 n5 + 0 1 1 n1 < 1 2 T n2 <= 1 1 T n3 + 1 1 2 n5 + 1 1 2 "
        "n1 < 2 2 F n6 2 mod 2 5")
    assert P.run(prog, 1, (2, 1)) == 2
    # a while loop returns to its test; an if without else falls through on its false edge
    loop = P.Program(latents=(("r", 1, 3),), body=(P.While(P.Cmp("<", P.Var("y"), P.Const(9)),
                                                           (P.Assign(P.Bin("+", P.Var("y"), P.Var("r"))),)),
                                                   P.If(P.Cmp(">", P.Var("y"), P.Const(9)),
                                                        then=(P.Assign(P.Const(0)),))),
                     ret=P.Var("y"), modulus=4)
    assert " ".join(P.to_flow_tokens(loop)) == ("r 1 3 | n0 if < y 9 g1 g2 n1 y= + y r g0 n2 if > y 9 g3 g4 "
                                                "n3 y= 0 g4 n4 ret y mod 4")


@pytest.mark.parametrize("split", ["if_else", "if_else_long", "while", "multi_r", "math"])
def test_flow_trace_agrees_with_the_interpreter(split):
    from rl_tools.counterfactuals import programs as P
    tok = data.CompactTokenizer()
    kept = 0
    for it in generate.generate_split(split, 30, seed=3, levels=(1, 2, 3))[0]:
        for x in (it.x0, it.x1):
            words = P.flow_trace(it.program, x, it.r_true)
            assert words[-3] == "mod" and int(words[-2]) % it.program.modulus == P.run(it.program, x, it.r_true)
        exs = data.examples([it], ("interventional",), tok, trace=True, trace_style="flow")
        if not exs:  # a trace value outside the vocabulary's numbers
            continue
        kept += 1
        prompt, answer = exs[0]
        assert tok.unk_id not in prompt and tok.decode(prompt).split()[:len(P.to_flow_tokens(it.program))] \
            == P.to_flow_tokens(it.program)
        assert tok.decode(answer).split()[-2:] == ["=>", str(it.answer_iv[0])]
    assert kept >= 20


@pytest.mark.parametrize("split", ["if_else", "if_else_long", "while", "multi_r", "math"])
def test_step_trace_agrees_with_the_interpreter(split):
    """After every `;` the step trace holds the interpreter's y; it ends with the return value and modulus."""
    from rl_tools.counterfactuals import programs as P
    for it in generate.generate_split(split, 30, seed=2, levels=(1, 2))[0]:
        ys, pre, _ = P.run_trace(it.program, it.x1, it.r_true)
        words = P.step_trace(it.program, it.x1, it.r_true)
        assert [words[i - 1] for i, w in enumerate(words) if w == ";"] == [str(v) for v in ys]
        assert words[-3:] == ["mod", str(pre), str(it.program.modulus)]
        ex = data.trace_words(it, "interventional", "steps")
        assert ex == words + ["=>"]


def test_fourier_number_init():
    config = EXPERIMENT.presets["tiny"]
    tok = data.CompactTokenizer()
    _, params = model_lib.init(config.model, jax.random.key(0))
    before = np.array(params["embed_tokens"].get_value())
    table = np.asarray(cf_train.fourier_number_init(params, tok, scale=0.5)["embed_tokens"].get_value())
    assert np.array_equal(np.asarray(params["embed_tokens"].get_value()), before)  # input untouched
    d = table.shape[1]  # 32 in the tiny model: 14 cos/sin pairs, 4 random dimensions left
    assert np.allclose(table[tok.ids["7"], 0:2], [0.5 * np.cos(np.pi * 7), 0.0], atol=1e-6)  # period 2
    assert np.allclose(table[tok.ids["7"], 2:4], 0.5 * np.array([np.cos(2 * np.pi * 7 / 3),
                                                                 np.sin(2 * np.pi * 7 / 3)]), atol=1e-6)
    assert np.array_equal(table[tok.ids["7"], 28:], before[tok.ids["7"], 28:]) and d == 32
    assert np.array_equal(table[tok.ids["y"]], before[tok.ids["y"]])  # non-number words keep their init


def test_saved_params_reload_and_a_wrong_width_is_one_line(tmp_path):
    import dataclasses
    config = EXPERIMENT.presets["tiny"]
    _, params = model_lib.init(config.model, jax.random.key(3))
    cf_train.save_params(params, tmp_path / "params.npz")
    _, loaded = cf_train.load_params(config.model, tmp_path / "params.npz")
    assert_trees_close(jax.tree.leaves(loaded), jax.tree.leaves(params), exact=True)
    wider = dataclasses.replace(config.model, hidden_size=2 * config.model.hidden_size)
    with pytest.raises(ValueError, match=r"array 0 has shape \(409, 32\), expected \(409, 64\).*hidden_size=64"):
        cf_train.load_params(wider, tmp_path / "params.npz")


def test_exec_families_train_programs_disjoint_from_evaluation():
    import dataclasses

    from rl_tools.counterfactuals import programs as P
    config = dataclasses.replace(EXPERIMENT.presets["tiny"], exec_families=("while", "math"), n_exec=40,
                                 n_eval=40)
    items, stats = cf_train.make_splits(config)
    for family in ("while", "math"):
        train_progs = {P.canonical(it.program) for it in items[f"{family}_exec"]}
        assert train_progs and not train_progs & {P.canonical(it.program) for it in items[family]}
        assert stats[f"{family}_exec"].items == 40
    base = cf_train.base_training_items(config, items)
    assert len(base) == len(items["if_else_train"]) + len(items["while_exec"]) + len(items["math_exec"])
    with pytest.raises(ValueError, match="exec_families"):
        dataclasses.replace(config, exec_families=("if_else",))
    with pytest.raises(ValueError, match="trace_style"):
        dataclasses.replace(config, trace_style="lines")
    with pytest.raises(ValueError, match="number_init"):
        dataclasses.replace(config, number_init="sinusoid")


def test_sharded_step_equals_single_device():
    config = EXPERIMENT.presets["tiny"]
    tok = data.CompactTokenizer()
    items = generate.generate_split("if_else_train", 40, seed=0)[0]
    rows = data.to_rows(data.examples(items, cf_train.TRAIN_VARIANTS, tok), config.seq_len)
    batch = {k: v[:8] for k, v in rows.items()}
    graphdef, params = model_lib.init(config.model, jax.random.key(0))
    tx = cf_train.make_optimizer(config)
    loss_fn = losses.next_token_loss(graphdef)
    state = train_lib.init_train_state(params, tx, jax.random.key(1))
    single, m1 = train_lib.make_train_step(loss_fn, tx, donate=False)(state, batch)
    mesh = sharding.make_mesh()
    assert mesh.shape["data"] == 8
    rep = jax.tree.map(lambda _: sharding.replicated(mesh), state)
    step = train_lib.make_train_step(loss_fn, tx, donate=False, state_sharding=rep,
                                     batch_sharding=sharding.batch_sharding(mesh))
    multi, m8 = step(sharding.replicate(state, mesh), sharding.shard_batch(batch, mesh))
    assert_trees_close(jax.device_get(multi.params), jax.device_get(single.params), atol=1e-5, rtol=1e-5)
    assert float(m8["loss"]) == pytest.approx(float(m1["loss"]), rel=1e-5)


def test_config_errors():
    with pytest.raises(ValueError, match="steps"):
        CFConfig(steps=0)
    with pytest.raises(ValueError, match="max_level"):
        config_lib.apply_overrides(EXPERIMENT.presets["tiny"], ["max_level=5"])
    cfg = config_lib.apply_overrides(EXPERIMENT.presets["tiny"], ["steps=3", "model.num_layers=2"])
    assert cfg.steps == 3 and cfg.model.num_layers == 2
