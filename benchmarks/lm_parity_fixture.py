"""Generate the HuggingFace-parity fixture for core.lm (needs torch + transformers: `pip install -e .[torch]`).

For each tiny Qwen2/Llama config below, the weights come from `core.lm.weights.random_hf_tensors(config, seed)`
(numpy only, so the test can rebuild them without torch); they are written with our `save_hf`, loaded by
`transformers.AutoModelForCausalLM` (eager attention, float32) and run on a left-padded batch with explicit
position ids; transformers' greedy `generate` (do_sample=False, no EOS, so every row runs all `GEN_NEW_TOKENS`
steps) also continues a left-padded batch of prompts of different lengths (`GEN_LENGTHS`, padded to
`GEN_PADDED`). The fixture keeps only configs, inputs, reference logits and greedy tokens (a few KB), not the
weights:

    .venv/bin/python benchmarks/lm_parity_fixture.py   # writes tests/core/lm/fixtures/lm_parity.{json,npz}

`tests/core/lm/test_lm_parity.py` compares our logits and our greedy `core.lm.generate` tokens against it (no
torch needed) and, when torch is installed, regenerates the reference live.
"""

from __future__ import annotations

import json
import pathlib
import tempfile

import numpy as np

from core.lm import weights as weights_lib
from core.lm.configs import LMConfig, RopeScaling

FIXTURE_DIR = pathlib.Path(__file__).resolve().parents[1] / "tests" / "core" / "lm" / "fixtures"

_BASE = dict(vocab_size=48, hidden_size=32, intermediate_size=48, num_layers=2, rms_norm_eps=1e-6)

# name -> (config, weight seed). GQA (kv < heads), MQA, bias on/off, tied/untied, rope scaling on/off,
# Qwen3 q/k norms.
CASES: dict[str, tuple[LMConfig, int]] = {
    "qwen2_gqa_bias_tied": (LMConfig(architecture="qwen2", num_heads=4, num_kv_heads=2, head_dim=8,
                                     attention_bias=True, tie_word_embeddings=True, rope_theta=10000.0,
                                     **_BASE), 1),
    "qwen2_mqa_bias_untied": (LMConfig(architecture="qwen2", num_heads=4, num_kv_heads=1, head_dim=8,
                                       attention_bias=True, tie_word_embeddings=False, rope_theta=1e6,
                                       **_BASE), 2),
    "llama_gqa_nobias_untied": (LMConfig(architecture="llama", num_heads=4, num_kv_heads=2, head_dim=8,
                                         attention_bias=False, tie_word_embeddings=False, rope_theta=500000.0,
                                         **_BASE), 3),
    "llama_llama3rope_tied_headdim": (LMConfig(
        architecture="llama", num_heads=4, num_kv_heads=2, head_dim=16, attention_bias=False,
        tie_word_embeddings=True, rope_theta=500000.0,
        rope_scaling=RopeScaling(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                 original_max_position_embeddings=8),
        **_BASE), 4),
    "llama_linearrope_bias": (LMConfig(
        architecture="llama", num_heads=2, num_kv_heads=2, head_dim=16, attention_bias=True,
        tie_word_embeddings=False, rope_theta=10000.0, rope_scaling=RopeScaling(rope_type="linear", factor=2.0),
        **_BASE), 5),
    "qwen3_qknorm_gqa_tied": (LMConfig(architecture="qwen3", num_heads=4, num_kv_heads=2, head_dim=16,
                                       attention_bias=False, tie_word_embeddings=True, rope_theta=1e6, **_BASE), 6),
}


def inputs(config: LMConfig, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """tokens (2, 12), attention mask (row 1 left-padded by 4), position ids = cumsum(mask) - 1."""
    rng = np.random.default_rng(1000 + seed)
    tokens = rng.integers(0, config.vocab_size, size=(2, 12)).astype(np.int64)
    mask = np.ones((2, 12), np.int64)
    mask[1, :4] = 0
    tokens[1, :4] = 0
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    return tokens, mask, positions


GEN_LENGTHS = (5, 8, 11)  # prompt lengths of the greedy-generation rows
GEN_PADDED = 12  # left-padded to this length with token 0, attention mask 0 on the pads
GEN_NEW_TOKENS = 10


def generation_inputs(config: LMConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-padded prompts (3, 12) of lengths 5 / 8 / 11 (pad id 0) and their attention mask."""
    rng = np.random.default_rng(2000 + seed)
    tokens = np.zeros((len(GEN_LENGTHS), GEN_PADDED), np.int64)
    mask = np.zeros_like(tokens)
    for row, n in enumerate(GEN_LENGTHS):
        tokens[row, GEN_PADDED - n:] = rng.integers(1, config.vocab_size, size=n)
        mask[row, GEN_PADDED - n:] = 1
    return tokens, mask


def weights_checksum(tensors: dict[str, np.ndarray]) -> float:
    return float(sum(np.float64(t).sum() for t in tensors.values()))


def hf_logits(folder: str | pathlib.Path, tokens, mask, positions) -> np.ndarray:
    """Reference logits from transformers (float32, eager attention)."""
    import torch
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if bad:
        raise RuntimeError(f"transformers did not load the folder cleanly: {bad}")
    model.eval()
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(tokens), attention_mask=torch.as_tensor(mask),
                    position_ids=torch.as_tensor(positions), use_cache=False)
    return out.logits.float().numpy()


def hf_greedy(folder: str | pathlib.Path, tokens, mask) -> tuple[np.ndarray, float]:
    """transformers' greedy continuation (B, GEN_NEW_TOKENS) of left-padded prompts, and the smallest gap
    between the best and second-best raw logit over all steps (how far the reference is from a tie)."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager")
    model.eval()
    config = GenerationConfig(do_sample=False, max_new_tokens=GEN_NEW_TOKENS, eos_token_id=None, pad_token_id=0,
                              bos_token_id=None)
    with torch.no_grad():
        out = model.generate(input_ids=torch.as_tensor(tokens), attention_mask=torch.as_tensor(mask),
                             generation_config=config, return_dict_in_generate=True, output_logits=True)
    new = out.sequences[:, tokens.shape[1]:].numpy()
    logits = torch.stack(out.logits, dim=1).float().numpy()  # (B, N, V) raw, before any logits processor
    if new.shape != (tokens.shape[0], GEN_NEW_TOKENS) or not np.array_equal(new, logits.argmax(-1)):
        raise RuntimeError("transformers' greedy tokens are not the argmax of its raw logits: a processor ran")
    top2 = np.sort(logits, axis=-1)[..., -2:]
    return new, float((top2[..., 1] - top2[..., 0]).min())


def reference(name: str) -> dict:
    config, seed = CASES[name]
    tensors = weights_lib.random_hf_tensors(config, seed)
    graphdef, params = weights_lib.params_from_hf_tensors(config, tensors)
    tokens, mask, positions = inputs(config, seed)
    with tempfile.TemporaryDirectory() as tmp:
        weights_lib.save_hf(tmp, config, params)
        logits = hf_logits(tmp, tokens, mask, positions)
        gen_prompt, gen_mask = generation_inputs(config, seed)
        greedy, gap = hf_greedy(tmp, gen_prompt, gen_mask)
    return dict(config=config, seed=seed, tokens=tokens, mask=mask, positions=positions, logits=logits,
                checksum=weights_checksum(tensors), gen_prompt=gen_prompt, gen_mask=gen_mask, greedy=greedy,
                greedy_min_gap=gap)


def main() -> None:
    import torch
    import transformers

    FIXTURE_DIR.mkdir(parents=True, exist_ok=True)
    meta = {"generated_by": "benchmarks/lm_parity_fixture.py", "torch": torch.__version__,
            "greedy": {"prompt_lengths": list(GEN_LENGTHS), "padded_to": GEN_PADDED, "new_tokens": GEN_NEW_TOKENS,
                       "pad_id": 0, "do_sample": False, "eos_token_id": None},
            "transformers": transformers.__version__, "numpy": np.__version__, "cases": {}}
    arrays = {}
    for name in CASES:
        ref = reference(name)
        meta["cases"][name] = {"hf_config": ref["config"].to_hf(), "seed": ref["seed"],
                               "weights_checksum": ref["checksum"], "greedy_min_top2_logit_gap": ref["greedy_min_gap"]}
        for key in ("tokens", "mask", "positions", "logits", "gen_prompt", "gen_mask", "greedy"):
            arrays[f"{name}/{key}"] = ref[key].astype(np.float32 if key == "logits" else np.int32)
        print(f"{name}: logits {ref['logits'].shape}, |logits| max {np.abs(ref['logits']).max():.3f}, greedy "
              f"{ref['greedy'].shape}, smallest top-2 logit gap {ref['greedy_min_gap']:.2e}")
    (FIXTURE_DIR / "lm_parity.json").write_text(json.dumps(meta, indent=2) + "\n")
    np.savez_compressed(FIXTURE_DIR / "lm_parity.npz", **arrays)
    print(f"wrote {FIXTURE_DIR}/lm_parity.json and lm_parity.npz")


if __name__ == "__main__":
    main()
