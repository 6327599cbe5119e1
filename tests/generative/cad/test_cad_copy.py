"""The actioner's copy path: the mixture against a NumPy reference, greedy decoding against the teacher-forced
mixture, a forced-copy hand case, and learning to copy levels never seen in training; the command-frame memory."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from core.lm import data as lm_data
from core.lm import model as model_lib
from core.lm.generate import pad_prompts
from generative.cad import corpus, data, model, tokens, train
from generative.cad.configs import presets

CONFIG = presets()["tiny"]


def _init(seed=0, gate_bias=None):
    graphdef, params = model_lib.init(CONFIG.model, jax.random.key(seed))
    copy_graphdef, copy_params = model.init_copy_head(CONFIG.model.hidden_size, jax.random.key(seed + 1))
    if gate_bias is not None:
        copy_params["gate"]["bias"].set_value(jnp.full((1,), gate_bias))
    return (graphdef, copy_graphdef), {"lm": params, "copy": copy_params}


def _reference_log_probs(graphdefs, params, inputs, segment_ids, loss_mask):
    """(B, T, V) log-probabilities of the generate / copy mixture, written out in NumPy position by position."""
    graphdef, _ = graphdefs
    out = model_lib.apply(graphdef, params["lm"], inputs, segment_ids=segment_ids, attention_mask=segment_ids > 0,
                          return_hidden=True)
    h = np.asarray(out.hidden, np.float64)
    emb = np.asarray(nnx.merge(graphdef, params["lm"]).unembedding(), np.float64)
    c = jax.tree.map(lambda x: np.asarray(x, np.float64), nnx.to_pure_dict(params["copy"]))
    q = h @ c["query"]["kernel"] + c["query"]["bias"]
    k = h @ c["key"]["kernel"] + c["key"]["bias"]
    z = (h @ c["gate"]["kernel"] + c["gate"]["bias"])[..., 0]
    inputs, seg, mask = np.asarray(inputs), np.asarray(segment_ids), np.asarray(loss_mask)
    B, T = inputs.shape
    V = emb.shape[1]
    out = np.zeros((B, T, V))
    for b in range(B):
        for t in range(T):
            logits = h[b, t] @ emb
            p_gen = np.exp(logits - logits.max())
            p_gen /= p_gen.sum()
            sources = [j for j in range(t + 1) if seg[b, j] == seg[b, t]
                       and tokens.IDS["v0"] <= inputs[b, j] <= tokens.IDS["v255"] and (j == 0 or mask[b, j - 1] == 0)]
            if not sources:
                out[b, t] = np.log(p_gen)
                continue
            s = np.array([q[b, t] @ k[b, j] for j in sources]) / np.sqrt(q.shape[-1])
            a = np.exp(s - s.max())
            a /= a.sum()
            g = 1 / (1 + np.exp(-z[b, t]))
            p = g * p_gen
            for j, w in zip(sources, a):
                p[inputs[b, j]] += (1 - g) * w
            out[b, t] = np.log(p)
    return out


def _batch(n_parts=6, length=256):
    rows = lm_data.pack(data.examples(corpus.make_corpus(n_parts, 0), "actioner", levels=(2, 3)), length)
    return {k: jnp.asarray(v[:2]) for k, v in rows.items()}


def test_copy_loss_equals_the_mixture_written_out():
    graphdefs, params = _init()
    batch = _batch()
    loss, metrics = model.copy_loss(*graphdefs)(params, batch, None)
    ref = _reference_log_probs(graphdefs, params, batch["inputs"], batch["segment_ids"], batch["loss_mask"])
    np.testing.assert_allclose(np.exp(ref).sum(-1), 1.0, atol=1e-6)
    w = np.asarray(batch["loss_mask"])
    target_lp = np.take_along_axis(ref, np.asarray(batch["targets"])[..., None], -1)[..., 0]
    np.testing.assert_allclose(float(loss), -(target_lp * w).sum() / w.sum(), rtol=2e-4)
    assert 0.0 < float(metrics["copy_gate"]) < 1.0


def test_greedy_decoding_follows_the_teacher_forced_mixture():
    graphdefs, params = _init(seed=3, gate_bias=0.5)
    parts = corpus.make_corpus(4, 1)
    prompts = [tokens.encode(data.actioner_prompt(p, 3, p.plan, data.gold_memory(p, 3))) for p in parts]
    ids, mask = pad_prompts(prompts, pad_id=tokens.PAD_ID, length=128)
    toks = np.asarray(model.copy_greedy(*graphdefs, params, ids, mask, max_new_tokens=12, eos_id=tokens.EOS_ID,
                                        pad_id=tokens.PAD_ID))
    for prompt, gen in zip(prompts, toks):
        gen = [int(t) for t in gen if t != tokens.PAD_ID]
        seq = prompt + gen
        inputs = jnp.asarray([seq[:-1]])
        loss_mask = np.zeros((1, len(seq) - 1), np.float32)
        loss_mask[0, len(prompt) - 1:] = 1.0
        ref = _reference_log_probs(graphdefs, params, inputs, jnp.ones_like(inputs), jnp.asarray(loss_mask))
        for i, tok in enumerate(gen):
            row = ref[0, len(prompt) - 1 + i]
            assert row[tok] >= row.max() - 1e-4, (i, tok, int(row.argmax()))


def test_a_closed_gate_copies_only_memory_levels():
    graphdefs, params = _init(gate_bias=-30.0)
    part = corpus.make_corpus(3, 2)[0]
    memory = data.gold_memory(part, 3)
    prompt = tokens.encode(data.actioner_prompt(part, 3, part.plan, memory))
    ids, mask = pad_prompts([prompt], pad_id=tokens.PAD_ID, length=128)
    toks = np.asarray(model.copy_greedy(*graphdefs, params, ids, mask, max_new_tokens=8, eos_id=tokens.EOS_ID,
                                        pad_id=tokens.PAD_ID))[0]
    assert set(tokens.decode(toks)) <= {w for w in memory if w.startswith("v")}


def test_the_copy_path_learns_to_copy_levels_it_never_saw(tmp_path):
    """Echo one stated level: trained on v0..v127 only, tested on v128..v255. Only copying can get these."""
    def example(v):
        return (tokens.encode(["<bos>", "<req>", "role:depth", f"v{v}", "<cmd>"]),
                tokens.encode(["EXT", f"v{v}"]) + [tokens.EOS_ID])

    rng = np.random.default_rng(0)
    config = dataclasses.replace(CONFIG, seq_len=232, batch_size=16, lr=1e-2, warmup=5, log_every=50)
    graphdefs, params, _ = train.train_decoder(config, [example(int(v)) for v in rng.integers(0, 128, 2000)], 120,
                                               tmp_path, jax.random.key(0), copy=True, progress_bar=False)
    test = list(range(128, 256, 8))
    outs = train.greedy(graphdefs, params, [example(v)[0] for v in test], 3, 16)
    copied = np.mean([tokens.decode(o)[:2] == ["EXT", f"v{v}"] for o, v in zip(outs, test)])
    assert copied > 0.9, copied  # without the copy path these levels are never produced (0 of 16)


@pytest.mark.parametrize("role, mm, levels", [("width", 60, ["v158", "v98"]), ("length", 22, ["v139", "v117"]),
                                              ("radius", 7, ["v135", "v121"]), ("depth", 9, ["v137"]),
                                              ("hole_x", -5, ["v123"])])
def test_command_levels(role, mm, levels):
    assert data.command_levels(role, mm) == levels


def test_the_base_sizes_in_the_memory_are_the_program_levels():
    """A centred base plate's stated width and length are the x / y levels of its outline's corners."""
    for part in corpus.make_corpus(40, 0):
        if part.spec[0]["kind"] not in ("rect", "lshape"):
            continue
        words = tokens.program_words(part.program)
        mem = data.gold_memory(part, 1)
        for role in ("width", "length"):
            i = mem.index(f"role:{role}")
            assert mem[i + 1] in words and mem[i + 2] in words


def test_relations_give_a_notch_corner_and_a_feature_edges():
    words = ("make l-shaped plate width 84 length 42 thickness 14 notch width 22 notch length 20 and a square pocket "
             "width 30 length 22 depth 10 at x 2 y 3").split()
    part = next(p for p in corpus.make_corpus(30, 0) if p.texts[3].split() == words)
    mem = data.gold_memory(part, 3)
    assert mem[mem.index("role:notch_w"):mem.index("role:notch_l")] == ["role:notch_w", "v150", "rel:corner", "v148"]
    i = mem.index("role:x")
    assert mem[i:i + 4] == ["role:x", "v130", "rel:centred", "v145"] and mem[i + 4] == "v115"  # 2 +- 15
    program = set(tokens.program_words(part.program))
    assert {"v148", "v145", "v115"} <= program


def test_memories_fit_the_prompt_and_row_lengths():
    parts = corpus.make_corpus(5000, 7)  # the expert level has the longest memories
    examples = data.examples(parts, "actioner", levels=(3,))
    assert max(len(p) for p, _ in examples) <= train.PROMPT_LENGTH
    assert max(len(p) + len(a) - 1 for p, a in examples) <= CONFIG.seq_len


def test_a_sharded_copy_step_equals_one_device():
    import optax

    from core.sharding import make_mesh, replicate, shard_batch
    from core.train import init_train_state, make_train_step

    graphdefs, params = _init()
    rows = lm_data.pack(data.examples(corpus.make_corpus(16, 0), "actioner"), CONFIG.seq_len)
    batch = {k: v[:8] for k, v in rows.items()}
    tx = optax.sgd(0.1)
    step = make_train_step(model.copy_loss(*graphdefs), tx, donate=False)
    state = init_train_state(params, tx, jax.random.key(1))
    single, m1 = step(state, batch)
    sharded, m8 = step(replicate(state, make_mesh(data=8)), shard_batch(batch, make_mesh(data=8)))
    assert len(jax.tree.leaves(sharded.params)[0].sharding.device_set) == 8
    np.testing.assert_allclose(float(m8["loss"]), float(m1["loss"]), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(single.params), jax.tree.leaves(sharded.params)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6)
