"""Logits (fp32, 1e-4) and greedy-generation (exact tokens) parity with HuggingFace transformers for tiny
random-init Qwen2/Llama configs.

The reference logits and greedy tokens live in tests/core/lm/fixtures (made by benchmarks/lm_parity_fixture.py);
the weights are
rebuilt from their seed with numpy, written with our save_hf and read back with our load_hf. A live test
regenerates the reference with transformers when torch is installed.
"""

import json
import pathlib

import jax
import numpy as np
import pytest

from core.lm import model as model_lib
from core.lm import weights as weights_lib
from core.lm.configs import LMConfig
from core.lm.generate import SamplingConfig, generate, pad_prompts

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
META = json.loads((FIXTURES / "lm_parity.json").read_text())
ARRAYS = np.load(FIXTURES / "lm_parity.npz")
CASES = sorted(META["cases"])
_apply = jax.jit(model_lib.apply, static_argnums=0)


def _ours(folder, tokens, mask, positions):
    config, graphdef, params = weights_lib.load_hf(folder)
    return np.asarray(_apply(graphdef, params, tokens, attention_mask=mask, positions=positions).logits)


def test_fixture_covers_the_issue_matrix():
    configs = [LMConfig.from_hf(META["cases"][n]["hf_config"]) for n in CASES]
    assert {c.architecture for c in configs} == {"qwen2", "llama", "qwen3"}
    assert any(c.num_kv_heads < c.num_heads for c in configs)
    assert {c.attention_bias for c in configs} == {True, False}
    assert {c.tie_word_embeddings for c in configs} == {True, False}
    assert {c.rope_scaling.rope_type for c in configs} >= {"default", "llama3", "linear"}
    assert (FIXTURES / "lm_parity.npz").stat().st_size + (FIXTURES / "lm_parity.json").stat().st_size < 200_000


@pytest.mark.parametrize("name", CASES)
def test_logits_match_transformers_fixture(name, tmp_path):
    case = META["cases"][name]
    config = LMConfig.from_hf(case["hf_config"])
    tensors = weights_lib.random_hf_tensors(config, case["seed"])
    checksum = sum(np.float64(t).sum() for t in tensors.values())
    assert checksum == pytest.approx(case["weights_checksum"], rel=1e-12), "numpy RNG stream changed: regenerate"
    graphdef, params = weights_lib.params_from_hf_tensors(config, tensors)
    weights_lib.save_hf(tmp_path, config, params)
    tokens, mask, positions, ref = (ARRAYS[f"{name}/{k}"] for k in ("tokens", "mask", "positions", "logits"))
    ours = _ours(tmp_path, tokens, mask, positions)
    valid = mask.astype(bool)
    np.testing.assert_allclose(ours[valid], ref[valid], atol=1e-4, rtol=1e-4)
    if name == CASES[0]:  # positions default to cumsum(mask) - 1, as HF's generate computes them
        default = np.asarray(_apply(graphdef, params, tokens, attention_mask=mask).logits)
        np.testing.assert_allclose(default[valid], ref[valid], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", CASES)
def test_greedy_generation_matches_transformers_fixture(name):
    """Left-padded rows of different prompt lengths (5 / 8 / 11 in 12 slots), 10 greedy tokens, no EOS: our
    `generate` emits exactly transformers' tokens (the fixture also records how far each step was from a tie)."""
    case, spec = META["cases"][name], META["greedy"]
    config = LMConfig.from_hf(case["hf_config"])
    tensors = weights_lib.random_hf_tensors(config, case["seed"])
    assert sum(np.float64(t).sum() for t in tensors.values()) == pytest.approx(case["weights_checksum"], rel=1e-12)
    graphdef, params = weights_lib.params_from_hf_tensors(config, tensors)
    prompt, prompt_mask, ref = (ARRAYS[f"{name}/{k}"] for k in ("gen_prompt", "gen_mask", "greedy"))
    prompts = [row[m.astype(bool)].tolist() for row, m in zip(prompt, prompt_mask)]
    assert [len(p) for p in prompts] == spec["prompt_lengths"] and case["greedy_min_top2_logit_gap"] > 1e-4
    tokens, mask = pad_prompts(prompts, pad_id=spec["pad_id"], length=spec["padded_to"])
    np.testing.assert_array_equal(tokens, prompt)
    np.testing.assert_array_equal(mask, prompt_mask.astype(bool))
    out = generate(graphdef, params, tokens, mask, jax.random.key(0),
                   SamplingConfig(max_new_tokens=spec["new_tokens"], temperature=0.0, pad_id=spec["pad_id"]))
    np.testing.assert_array_equal(np.asarray(out.tokens), ref)
    assert np.asarray(out.mask).all()


@pytest.mark.parametrize("name", CASES)
def test_logits_match_transformers_live(name, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from benchmarks import lm_parity_fixture as fx

    ref = fx.reference(name)
    valid = ref["mask"].astype(bool)
    # HF writes the folder (sharded with an index) and our loader reads it
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**ref["config"].to_hf()), dtype=torch.float32)
    sd = {k: torch.as_tensor(v) for k, v in weights_lib.random_hf_tensors(ref["config"], ref["seed"]).items()}
    result = model.load_state_dict(sd, strict=False)
    assert not result.unexpected_keys and set(result.missing_keys) <= {"lm_head.weight"}
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    ours = _ours(tmp_path, ref["tokens"], ref["mask"], ref["positions"])
    np.testing.assert_allclose(ours[valid], ref["logits"][valid], atol=1e-4, rtol=1e-4)
