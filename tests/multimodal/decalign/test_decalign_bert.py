"""The BERT token-id text path: a tiny random HF BERT folder written here, read back, run against a numpy
reference, and used by the real training function on the shipped unaligned sample's `text_bert`."""

import dataclasses
import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file, save_file

from core.config import BadInputError, ConfigError
from multimodal.decalign import bert as B
from multimodal.decalign import configs, train
from multimodal.decalign import data as D

SAMPLE = pathlib.Path(__file__).with_name("decalign_sample_mmsa_unaligned.pkl")
TINY = B.BertConfig(vocab_size=32, hidden_size=8, num_layers=2, num_heads=2, intermediate_size=16,
                    max_position_embeddings=16, type_vocab_size=2)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert")
    params = B.random_bert(TINY, seed=0)
    B.save_bert(path, TINY, params)
    return path, params


def _ln(x, s, b, eps):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * s + b


def _reference(p, ids, mask, seg, c):
    """BertModel's last hidden state, one example and one head at a time, in float64 numpy."""
    erf = np.vectorize(math.erf)
    out = []
    for i in range(ids.shape[0]):
        L = ids.shape[1]
        x = p["word"][ids[i]] + p["pos"][:L] + p["type"][seg[i]]
        x = _ln(x, p["ln_s"], p["ln_b"], c.layer_norm_eps)
        for l in range(c.num_layers):
            g = {k: p[k][l] for k in B.LAYER_KEYS}
            e = c.hidden_size // c.num_heads
            heads = []
            for h in range(c.num_heads):
                sl = slice(h * e, (h + 1) * e)
                q, k, v = [(x @ g[w] + g[bb])[:, sl] for w, bb in (("wq", "bq"), ("wk", "bk"), ("wv", "bv"))]
                s = q @ k.T / np.sqrt(e) + np.where(mask[i][None] > 0, 0.0, -1e9)
                w = np.exp(s - s.max(-1, keepdims=True))
                heads.append((w / w.sum(-1, keepdims=True)) @ v)
            x = _ln(x + np.concatenate(heads, -1) @ g["wo"] + g["bo"], g["ln1_s"], g["ln1_b"], c.layer_norm_eps)
            u = x @ g["w1"] + g["b1"]
            f = (0.5 * u * (1 + erf(u / np.sqrt(2)))) @ g["w2"] + g["b2"]
            x = _ln(x + f, g["ln2_s"], g["ln2_b"], c.layer_norm_eps)
        out.append(x)
    return np.stack(out)


def test_folder_round_trip_and_hf_name_variants(folder, tmp_path):
    path, params = folder
    config, back = B.read_bert(path)
    assert config == TINY
    for k, v in params.items():
        np.testing.assert_array_equal(back[k], v)
    # a BertForPreTraining-style checkpoint: `bert.` prefix and the old LayerNorm gamma/beta names
    tensors = load_file(str(path / "model.safetensors"))
    renamed = {"bert." + k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
               for k, v in tensors.items()}
    (tmp_path / "old").mkdir()
    save_file(renamed, str(tmp_path / "old" / "model.safetensors"))
    (tmp_path / "old" / "config.json").write_text((path / "config.json").read_text())
    np.testing.assert_array_equal(B.read_bert(tmp_path / "old")[1]["ln1_s"], params["ln1_s"])


def test_bad_folders_raise_one_line_errors(folder, tmp_path):
    path, params = folder
    with pytest.raises(BadInputError, match="config.json: no such file"):
        B.read_bert(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**TINY.to_hf(), "hidden_size": 12}))
    save_file(load_file(str(path / "model.safetensors")), str(tmp_path / "model.safetensors"))
    with pytest.raises(BadInputError,
                       match=r"embeddings.word_embeddings.weight has shape \(32, 8\): expected \(32, 12\)"):
        B.read_bert(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**TINY.to_hf(), "model_type": "gpt2"}))
    with pytest.raises(BadInputError, match="model_type='gpt2': expected 'bert'"):
        B.read_bert(tmp_path)


def test_forward_matches_reference_and_ignores_padding(folder):
    _, params = folder
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 32, size=(3, 7))
    mask = (np.arange(7)[None] < np.array([[7], [4], [2]])).astype(np.int32)
    seg = (np.arange(7)[None] >= 3).astype(np.int32).repeat(3, 0)
    jp = {k: jnp.asarray(v) for k, v in params.items()}
    got = np.asarray(B.bert_forward(jp, jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(seg), TINY))
    ref = _reference({k: v.astype(np.float64) for k, v in params.items()}, ids, mask, seg, TINY)
    np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4)
    # three more padding tokens (junk ids, mask 0): the valid positions do not change
    ids2 = np.concatenate([ids, rng.integers(0, 32, size=(3, 3))], 1)
    mask2 = np.pad(mask, ((0, 0), (0, 3)))
    seg2 = np.pad(seg, ((0, 0), (0, 3)))
    got2 = np.asarray(B.bert_forward(jp, jnp.asarray(ids2), jnp.asarray(mask2), jnp.asarray(seg2), TINY))
    for i, n in enumerate(mask.sum(1)):
        np.testing.assert_allclose(got2[i, :n], got[i, :n], rtol=1e-5, atol=1e-5)


def test_token_id_path_loads_the_folder_into_the_model(folder, tmp_path):
    path, params = folder
    data = D.load_mmsa(SAMPLE, text_input="bert")
    assert data["train"]["text"].shape[-1] == 3  # (N, L, 3): ids, mask, segments
    np.testing.assert_array_equal(data["train"]["text_lengths"], data["train"]["text"][:, :, 1].sum(1))
    cfg = configs.tiny()
    cfg = dataclasses.replace(cfg, variants=("full",),
                              data=dataclasses.replace(cfg.data, source="pickle", path=str(SAMPLE), text_input="bert"),
                              model=dataclasses.replace(cfg.model, text_encoder=str(path)),
                              train=dataclasses.replace(cfg.train, epochs=1))
    graphdef, init = train.make_model(cfg, train.input_dims(data))
    loaded = B.load_text_encoder(init(jax.random.key(0)), path)
    np.testing.assert_array_equal(np.asarray(nnx.to_pure_dict(loaded)["text_encoder"]["p_word"]), params["word"])
    model = nnx.merge(graphdef, loaded)
    tr = data["train"]
    lengths = jnp.stack([jnp.asarray(tr[k][:4]) for k in D.LENGTH_KEYS])
    out = model(jnp.asarray(tr["text"][:4]), jnp.asarray(tr["audio"][:4]), jnp.asarray(tr["vision"][:4]), None,
                lengths=lengths)
    assert out["out"].shape == (4, 1) and np.all(np.isfinite(np.asarray(out["out"])))
    # the text branch is BERT's output on the ids: other ids, another prediction
    ids = tr["text"][:4].copy()
    ids[:, :, 0] = (ids[:, :, 0] + 1) % TINY.vocab_size
    other = model(jnp.asarray(ids), jnp.asarray(tr["audio"][:4]), jnp.asarray(tr["vision"][:4]), None, lengths=lengths)
    assert np.abs(np.asarray(other["out"]) - np.asarray(out["out"])).max() > 1e-4
    with pytest.raises(ConfigError, match="model.text_encoder"):
        dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, text_encoder=""))
    with pytest.raises(D.DataSchemaError, match="missing key 'text_bert'"):
        D.load_mmsa(pathlib.Path(__file__).with_name("decalign_sample_mmsa.pkl"), text_input="bert")


@pytest.mark.slow
def test_token_id_path_trains(folder, tmp_path):
    """The real training function with the BERT text encoder (fine-tuned) on the unaligned sample's text_bert."""
    path, _ = folder
    cfg = configs.tiny()
    cfg = dataclasses.replace(cfg, variants=("full",),
                              data=dataclasses.replace(cfg.data, source="pickle", path=str(SAMPLE), text_input="bert"),
                              model=dataclasses.replace(cfg.model, text_encoder=str(path)),
                              train=dataclasses.replace(cfg.train, epochs=1))
    res = train.train_and_evaluate(cfg, tmp_path / "run", progress=False)
    assert np.isfinite(res["runs"][0]["mae"]) and np.all(np.isfinite(res["history"]["terms"][-1]["loss"]))
