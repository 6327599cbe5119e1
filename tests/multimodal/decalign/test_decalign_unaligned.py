"""Unaligned MMSA layouts (a padded length per modality, valid lengths per clip): loader, masks, training."""

import dataclasses
import pathlib
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from multimodal.decalign import configs, train
from multimodal.decalign import data as D
from multimodal.decalign.model import DecAlign

SAMPLE = pathlib.Path(__file__).with_name("decalign_sample_mmsa_unaligned.pkl")


def _unaligned(**kw):
    args = dict(n_train=24, n_valid=8, n_test=8, seq_len=5, dim_text=8, dim_audio=5, dim_vision=6, seed=3,
                unaligned=True, seq_len_audio=11, seq_len_vision=7)
    args.update(kw)
    return D.generate(**args)


def test_shipped_unaligned_sample_loads_with_per_modality_lengths():
    data = D.load_mmsa(SAMPLE)
    tr = data["train"]
    assert tr["text"].shape[1] != tr["audio"].shape[1] != tr["vision"].shape[1]
    raw = pickle.loads(SAMPLE.read_bytes())
    np.testing.assert_array_equal(tr["audio_lengths"], raw["train"]["audio_lengths"])
    np.testing.assert_array_equal(tr["vision_lengths"], raw["train"]["vision_lengths"])
    # the text length comes from MMSA's text_bert attention-mask row
    np.testing.assert_array_equal(tr["text_lengths"], raw["train"]["text_bert"][:, 1].sum(-1))
    assert tr["text_lengths"].min() < tr["text"].shape[1] and tr["audio_lengths"].min() < tr["audio"].shape[1]
    assert train.is_unaligned(data)
    assert SAMPLE.stat().st_size < 40_000


def test_generator_unaligned_layout_zero_padding_and_same_labels():
    raw = _unaligned()
    aligned = _unaligned(unaligned=False)
    tr = raw["train"]
    assert tr["audio"].shape == (24, 11, 5) and tr["vision"].shape == (24, 7, 6) and tr["text"].shape == (24, 5, 8)
    for m in ("audio", "vision"):
        lens = tr[f"{m}_lengths"]
        big = tr[m].shape[1]
        assert lens.min() >= (big + 1) // 2 and lens.max() <= big
        for i, li in enumerate(lens):
            assert np.all(tr[m][i, li:] == 0) and np.any(tr[m][i, :li] != 0)
    np.testing.assert_array_equal(tr["regression_labels"], aligned["train"]["regression_labels"])
    np.testing.assert_array_equal(tr["text"], aligned["train"]["text"])


def test_length_errors_and_clamping(tmp_path):
    raw = _unaligned()

    def write(r):
        p = tmp_path / "u.pkl"
        p.write_bytes(pickle.dumps(r))
        return p

    bad = {s: dict(v) for s, v in raw.items()}
    bad["train"]["audio_lengths"] = bad["train"]["audio_lengths"] + 100
    with pytest.raises(D.DataSchemaError,
                       match=r"train.audio_lengths: values in \[.*\]: expected lengths in \[0, 11\]"):
        D.load_mmsa(write(bad))
    bad = {s: dict(v) for s, v in raw.items()}
    bad["valid"]["vision_lengths"] = bad["valid"]["vision_lengths"][:3]
    with pytest.raises(D.DataSchemaError, match=r"valid.vision_lengths: shape \(3,\).*expected \(8,\) integer lengths"):
        D.load_mmsa(write(bad))
    bad = {s: dict(v) for s, v in raw.items()}
    bad["test"]["audio_lengths"] = bad["test"]["audio_lengths"].copy()
    bad["test"]["audio_lengths"][0] = 0
    assert D.load_mmsa(write(bad))["test"]["audio_lengths"][0] == 1  # a clip with no frames keeps one
    # splits padded to different lengths are padded to the longest, lengths unchanged
    bad = {s: dict(v) for s, v in raw.items()}
    bad["valid"]["audio"] = bad["valid"]["audio"][:, :9]
    bad["valid"]["audio_lengths"] = np.minimum(bad["valid"]["audio_lengths"], 9)
    out = D.load_mmsa(write(bad))
    assert out["valid"]["audio"].shape == (8, 11, 5) and np.all(out["valid"]["audio"][:, 9:] == 0)


@pytest.fixture(scope="module")
def model_and_data():
    raw = _unaligned()
    data = {s: D.check_split(raw[s], name=s) for s in D.SPLITS}
    cfg = configs.ModelConfig(d_model=16, num_heads=2, num_layers=2, proto_dim=8)
    model = DecAlign(cfg, (8, 5, 6), rngs=nnx.Rngs(0))
    return model, data["train"]


def _call(model, batch, lengths=True):
    lens = jnp.stack([jnp.asarray(batch[k]) for k in D.LENGTH_KEYS]) if lengths else None
    return model(jnp.asarray(batch["text"]), jnp.asarray(batch["audio"]), jnp.asarray(batch["vision"]), None,
                 lengths=lens)


def _pad(batch, extra, junk=None):
    """Extra padding at the end of every modality, filled with zeros or, with `junk` (a seed), random values."""
    out = dict(batch)
    rng = np.random.default_rng(junk)
    for m in D.MODALITIES:
        x = np.pad(batch[m], ((0, 0), (0, extra[m]), (0, 0)))
        if junk is not None:
            lens = batch[D.LENGTH_KEYS[D.MODALITIES.index(m)]]
            pad = np.arange(x.shape[1])[None, :] >= lens[:, None]
            x = np.where(pad[..., None], rng.normal(size=x.shape) * 10, x).astype(np.float32)
        out[m] = x
    return out


def test_padding_does_not_change_outputs(model_and_data):
    model, batch = model_and_data
    ref = _call(model, batch)
    for extra, junk in (({"text": 3, "audio": 0, "vision": 9}, None), ({"text": 0, "audio": 4, "vision": 1}, 1)):
        got = _call(model, _pad(batch, extra, junk))
        for k in ("out", "rep", "s_pooled", "z"):
            np.testing.assert_allclose(np.asarray(got[k]), np.asarray(ref[k]), rtol=1e-5, atol=1e-5, err_msg=k)
        # the padded positions of s and c are zero, so the flattened decoupling cosine is unchanged too
        from multimodal.decalign.losses import decoupling_loss
        np.testing.assert_allclose(float(decoupling_loss(got["s"], got["c"])),
                                   float(decoupling_loss(ref["s"], ref["c"])), rtol=1e-5)


def test_padded_batch_equals_each_clip_cut_to_its_own_lengths(model_and_data):
    model, batch = model_and_data
    ref = np.asarray(_call(model, batch)["out"])
    for i in (0, 5, 11):
        lt, la, lv = (int(batch[k][i]) for k in D.LENGTH_KEYS)
        clip = {"text": batch["text"][i:i + 1, :lt], "audio": batch["audio"][i:i + 1, :la],
                "vision": batch["vision"][i:i + 1, :lv]}
        out = model(*(jnp.asarray(clip[m]) for m in D.MODALITIES), None)["out"]  # no padding, no lengths
        np.testing.assert_allclose(np.asarray(out)[0], ref[i], rtol=1e-5, atol=1e-5)


def test_the_mask_is_what_makes_padding_harmless(model_and_data):
    model, batch = model_and_data
    junk = _pad(batch, {"text": 0, "audio": 0, "vision": 0}, junk=2)  # junk in the existing padding
    masked = np.asarray(_call(model, junk)["out"])
    unmasked = np.asarray(_call(model, junk, lengths=False)["out"])
    np.testing.assert_allclose(masked, np.asarray(_call(model, batch)["out"]), rtol=1e-5, atol=1e-5)
    assert np.abs(unmasked - masked).max() > 1e-2


def test_training_on_unaligned_data_with_the_official_variants(tmp_path):
    """The real training function on unaligned data, with post-norm, per-modality dropout, Adam-L2, the plateau
    scheduler and the averaged moment loss all switched on; the recorded lr factors follow the plateau rule."""
    cfg = configs.tiny()
    cfg = dataclasses.replace(
        cfg, variants=("full",),
        model=dataclasses.replace(cfg.model, norm="post", input_dropout=(0.1, 0.0, 0.0), attn_dropout=(0.1, 0.0, 0.2),
                                  relu_dropout=0.1, embed_dropout=0.1),
        loss=dataclasses.replace(cfg.loss, moment_pairs="mean"),
        train=dataclasses.replace(cfg.train, epochs=3, optimizer="adam_l2", scheduler="plateau", plateau_patience=0,
                                  plateau_factor=0.5))
    data = D.load_mmsa(SAMPLE)
    res = train.train_and_evaluate(cfg, tmp_path, data=data, progress=False)
    assert res["input_dims"] == [data["train"][m].shape[-1] for m in D.MODALITIES]
    terms = res["history"]["terms"][-1]
    for t in ("task", "dec", "hetero", "homo", "ct"):
        assert np.all(np.isfinite(terms[t])), t
    state = {"best": np.inf, "bad": 0, "scale": 1.0}
    for v, scales in zip(res["history"]["val_loss"], res["history"]["lr_scale"]):
        state = train.plateau_update(state, v[0], patience=0, factor=0.5)
        assert scales == [state["scale"]]
    assert set(res["runs"][0]) >= {"failed", "failure", "mae"}


@pytest.mark.slow
def test_sharded_masked_step_equals_single_device():
    """The masked (unaligned) training step, batch sharded over 8 fake CPU devices, equals one device."""
    import optax

    from core.sharding import make_mesh, replicate, shard_batch

    cfg = configs.tiny()
    data = D.load_mmsa(SAMPLE)
    graphdef, init = train.make_model(cfg, train.input_dims(data))
    tx = optax.sgd(0.1)  # as in test_decalign_train: keeps the comparison about the step's computation
    params = init(jax.random.key(0))
    state = train.TrainState(params, tx.init(params), jnp.zeros((), jnp.int32), jax.random.key(1))
    batch = {k: jnp.asarray(data["train"][k][:16]) for k in (*D.MODALITIES, *D.LENGTH_KEYS, "labels")}
    step = jax.jit(train.make_train_step(cfg, graphdef, tx), compiler_options=train.compiler_options(cfg))
    single, m1 = step(state, batch, jnp.ones(4))
    mesh = make_mesh(data=8)
    sharded, m8 = step(replicate(state, mesh), shard_batch(batch, mesh), replicate(jnp.ones(4), mesh))
    for k in m1:
        np.testing.assert_allclose(np.asarray(m8[k]), np.asarray(m1[k]), rtol=1e-4, atol=1e-5, err_msg=k)
    for a, b in zip(jax.tree.leaves(single.params), jax.tree.leaves(sharded.params)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5)
