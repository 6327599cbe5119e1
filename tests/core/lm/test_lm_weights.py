"""HF checkpoint folders: round trips (single file, sharded index, bf16), loading onto a mesh, and the
clear errors for bad folders. Also the model-sharded forward on 8 fake devices."""

import json

import jax
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from core.lm import model as model_lib
from core.lm import weights as weights_lib
from core.lm.configs import LMConfig
from core.lm.sharding import logical_to_spec, param_shardings, shard_params
from core.sharding import make_mesh

SHARDABLE = LMConfig(architecture="qwen2", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                     num_heads=8, num_kv_heads=4, head_dim=4, attention_bias=True, tie_word_embeddings=False)
TOKENS = np.array([[1, 5, 9, 13, 2, 60, 33, 7], [4, 4, 4, 8, 16, 32, 63, 0]], np.int32)


def _folder(tmp_path, config=SHARDABLE, **kw):
    tensors = weights_lib.random_hf_tensors(config, 0)
    graphdef, params = weights_lib.params_from_hf_tensors(config, tensors)
    weights_lib.save_hf(tmp_path, config, params, **kw)
    return tensors, graphdef, params


def test_round_trip_sharded_index_and_bf16(tmp_path):
    tensors, graphdef, params = _folder(tmp_path / "a", max_shard_bytes=8_000)
    assert (tmp_path / "a" / "model.safetensors.index.json").exists()
    config, g2, p2 = weights_lib.load_hf(tmp_path / "a")
    assert config == SHARDABLE
    for name, t in weights_lib.to_hf_tensors(config, p2).items():
        np.testing.assert_array_equal(t, tensors[name])
    weights_lib.save_hf(tmp_path / "b", config, p2, dtype="bfloat16")
    stored = load_file(str(tmp_path / "b" / "model.safetensors"))
    assert stored["model.norm.weight"].dtype == ml_dtypes.bfloat16
    assert json.loads((tmp_path / "b" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    config_b, _, p3 = weights_lib.load_hf(tmp_path / "b")
    w = weights_lib.to_hf_tensors(config_b, p3)["model.layers.1.mlp.up_proj.weight"]
    np.testing.assert_array_equal(w, tensors["model.layers.1.mlp.up_proj.weight"].astype(ml_dtypes.bfloat16)
                                  .astype(np.float32))
    _, _, p4 = weights_lib.load_hf(tmp_path / "b", param_dtype="bfloat16")
    assert p4["layers"][0]["mlp"]["up_proj"][...].dtype == ml_dtypes.bfloat16


def test_model_sharded_forward_equals_single_device(tmp_path, devices):
    tensors, graphdef, params = _folder(tmp_path)
    mesh = make_mesh(data=2, model=4)
    _, g2, sharded = weights_lib.load_hf(tmp_path, mesh=mesh)  # straight onto the mesh
    q = sharded["layers"][0]["self_attn"]["q_proj"][...]
    assert q.sharding.spec == jax.sharding.PartitionSpec(None, "model", None)
    assert len(q.addressable_shards) == 8 and q.addressable_shards[0].data.shape == (32, 2, 4)
    assert sharded["lm_head"][...].sharding.spec == jax.sharding.PartitionSpec(None, "model")
    apply = jax.jit(model_lib.apply, static_argnums=0)
    single = apply(graphdef, params, TOKENS).logits
    out = apply(g2, sharded, TOKENS).logits
    np.testing.assert_allclose(np.asarray(out), np.asarray(single), atol=1e-5, rtol=1e-5)
    again = shard_params(params, mesh)
    np.testing.assert_allclose(np.asarray(apply(graphdef, again, TOKENS).logits), np.asarray(single), atol=1e-5,
                               rtol=1e-5)


def test_non_divisible_dims_stay_replicated(devices):
    mesh = make_mesh(data=2, model=4)
    assert logical_to_spec(("embed", "kv_heads", "head_dim"), (32, 2, 8), mesh) == jax.sharding.PartitionSpec(
        None, None, None)
    assert logical_to_spec(("embed", "heads", "head_dim"), (32, 8, 8), mesh) == jax.sharding.PartitionSpec(
        None, "model", None)
    _, abstract = model_lib.abstract(LMConfig())  # 4 heads, 2 kv heads, vocab 64
    specs = param_shardings(abstract, mesh)
    assert specs["layers"][0]["self_attn"]["k_proj"].get_value().spec == jax.sharding.PartitionSpec(None, None, None)


def test_config_weight_mismatch_is_named(tmp_path):
    _folder(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"mlp.gate_proj.weight.*shape \(64, 32\): expected \(96, 32\)"):
        weights_lib.load_hf(tmp_path)


def test_missing_shard_is_named(tmp_path):
    _folder(tmp_path, max_shard_bytes=8_000)
    (tmp_path / "model-00002-of-00013.safetensors").unlink()
    with pytest.raises(ValueError, match=r"missing shard file\(s\) \[.model-00002-of-00013.safetensors.\]"):
        weights_lib.load_hf(tmp_path)


def test_missing_tensor_and_tied_mismatch(tmp_path):
    _folder(tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    del tensors["lm_head.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="lacks 1 tensor.*lm_head.weight.*tie_word_embeddings=False"):
        weights_lib.load_hf(tmp_path)


def test_unsupported_architecture_and_empty_folder(tmp_path):
    cfg = SHARDABLE.to_hf()
    cfg["architectures"] = ["GPT2LMHeadModel"]
    cfg["model_type"] = "gpt2"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"architectures=\['GPT2LMHeadModel'\].*expected one of"):
        weights_lib.load_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(SHARDABLE.to_hf()))
    with pytest.raises(ValueError, match="expected model.safetensors or model.safetensors.index.json"):
        weights_lib.load_hf(tmp_path)
    with pytest.raises(ValueError, match="expected an existing directory"):
        weights_lib.load_hf(tmp_path / "nope")
    with pytest.raises(ValueError, match="rope_type"):
        LMConfig.from_hf({**SHARDABLE.to_hf(), "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})


def test_check_hf_folder_names_the_option_and_the_missing_files(tmp_path):
    with pytest.raises(ValueError, match=r"^model_dir='.*nope': expected a HuggingFace folder .*"
                                         r"\(missing config.json, tokenizer.json;"):
        weights_lib.check_hf_folder(tmp_path / "nope", "model_dir")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"^planner_path=.*\(missing tokenizer.json;"):
        weights_lib.check_hf_folder(str(tmp_path), "planner_path")
    (tmp_path / "tokenizer.json").write_text("{}")
    assert weights_lib.check_hf_folder(str(tmp_path), "planner_path") == tmp_path

def test_config_hf_round_trip_and_validation():
    for c in (SHARDABLE, LMConfig(architecture="llama", attention_bias=False, tie_word_embeddings=True)):
        assert LMConfig.from_hf(c.to_hf()) == c
    # a transformers-4 style Llama-3 config (rope_theta / rope_scaling at the top level)
    old = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
           "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    c = LMConfig.from_hf(old)
    assert c.head_dim == 16 and c.rope_scaling.factor == 32.0 and not c.attention_bias and c.rope_theta == 5e5
    with pytest.raises(ValueError, match="num_kv_heads=3: expected a divisor of num_heads=4"):
        LMConfig(num_heads=4, num_kv_heads=3)
