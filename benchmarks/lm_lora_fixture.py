"""Generate the HF PEFT LoRA fixture for core.lm.lora (needs torch + transformers + peft: `pip install -e .[torch]`).

For each tiny config below, the base weights come from `core.lm.weights.random_hf_tensors(config, seed)` (numpy
only, so the test rebuilds them without torch); they are written with our `save_hf` and loaded by transformers
(float32, eager attention). `peft.get_peft_model` wraps the model with the case's `peft.LoraConfig`; every
lora_B is then drawn from N(0, 0.2^2) (PEFT would start it at zero, which would test nothing), the adapter is
saved with PEFT's `save_pretrained` and the LoRA model's logits (eval mode: no dropout) on a left-padded batch
are stored. Only the adapter folders (a few KB each), inputs and logits are committed:

    .venv/bin/python benchmarks/lm_lora_fixture.py   # writes tests/core/lm/fixtures/lora_peft{.json,.npz,_<case>/}

`tests/core/lm/test_lm_lora.py` loads PEFT's folders with `core.lm.lora.load_peft` and compares our forward to
the stored logits (no torch needed) and, when peft is installed, loads our `save_peft` output in PEFT.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import tempfile

import numpy as np

from core.lm import weights as weights_lib
from core.lm.configs import LMConfig

FIXTURE_DIR = pathlib.Path(__file__).resolve().parents[1] / "tests" / "core" / "lm" / "fixtures"

_BASE = dict(vocab_size=40, hidden_size=32, intermediate_size=48, num_layers=2, rms_norm_eps=1e-6)

# name -> (config, weight seed, peft.LoraConfig arguments). Every target, bias on q/k/v (Qwen2) and on o
# (Llama), q/k norms after the adapted q/k (Qwen3), head_dim * heads != hidden (o_proj's input is 64 wide),
# a subset of layers, rsLoRA.
CASES: dict[str, tuple[LMConfig, int, dict]] = {
    "qwen2_all_targets": (
        LMConfig(architecture="qwen2", num_heads=4, num_kv_heads=2, head_dim=8, attention_bias=True,
                 tie_word_embeddings=True, **_BASE), 11,
        dict(r=4, lora_alpha=16, lora_dropout=0.1,
             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])),
    "qwen3_rslora_layer1": (
        LMConfig(architecture="qwen3", num_heads=4, num_kv_heads=2, head_dim=16, attention_bias=False,
                 tie_word_embeddings=False, rope_theta=1e6, **_BASE), 12,
        dict(r=2, lora_alpha=4, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "o_proj", "down_proj"],
             layers_to_transform=[1], use_rslora=True)),
    "llama_obias_mlp": (
        LMConfig(architecture="llama", num_heads=4, num_kv_heads=1, head_dim=8, attention_bias=True,
                 tie_word_embeddings=False, rope_theta=500000.0, **_BASE), 13,
        dict(r=8, lora_alpha=8, lora_dropout=0.05, target_modules=["v_proj", "o_proj", "gate_proj", "up_proj"])),
}


def inputs(config: LMConfig, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """tokens (2, 10), attention mask (row 1 left-padded by 3), position ids = cumsum(mask) - 1."""
    rng = np.random.default_rng(3000 + seed)
    tokens = rng.integers(0, config.vocab_size, size=(2, 10)).astype(np.int64)
    mask = np.ones((2, 10), np.int64)
    mask[1, :3] = 0
    tokens[1, :3] = 0
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    return tokens, mask, positions


def base_folder(folder: str | pathlib.Path, config: LMConfig, seed: int) -> dict[str, np.ndarray]:
    """Write the case's base model with our save_hf; returns its HF tensors."""
    tensors = weights_lib.random_hf_tensors(config, seed)
    _, params = weights_lib.params_from_hf_tensors(config, tensors)
    weights_lib.save_hf(folder, config, params)
    return tensors


def _hf_model(folder):
    import torch
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if bad:
        raise RuntimeError(f"transformers did not load the folder cleanly: {bad}")
    return model


def _logits(model, tokens, mask, positions) -> np.ndarray:
    import torch

    model.eval()
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(tokens), attention_mask=torch.as_tensor(mask),
                    position_ids=torch.as_tensor(positions), use_cache=False)
    return out.logits.float().numpy()


def peft_logits(base: str | pathlib.Path, adapter: str | pathlib.Path, tokens, mask, positions) -> np.ndarray:
    """Logits of transformers' base model with PEFT's `PeftModel.from_pretrained(base, adapter)` (eval mode)."""
    from peft import PeftModel

    model = PeftModel.from_pretrained(_hf_model(base), str(adapter))
    return _logits(model, tokens, mask, positions)


def reference(name: str, adapter_folder: str | pathlib.Path) -> dict:
    """Build the case's PEFT model, save its adapter to `adapter_folder`, return inputs and its logits."""
    import peft
    import torch

    config, seed, lora_kwargs = CASES[name]
    tokens, mask, positions = inputs(config, seed)
    with tempfile.TemporaryDirectory() as tmp:
        tensors = base_folder(tmp, config, seed)
        torch.manual_seed(seed)
        model = peft.get_peft_model(_hf_model(tmp), peft.LoraConfig(task_type="CAUSAL_LM", **lora_kwargs))
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if ".lora_B." in pname:
                    p.normal_(0.0, 0.2)
        logits = _logits(model, tokens, mask, positions)
        model.save_pretrained(str(adapter_folder))
        with model.disable_adapter():
            base_logits = _logits(model, tokens, mask, positions)
    (pathlib.Path(adapter_folder) / "README.md").unlink(missing_ok=True)  # PEFT's model-card stub
    return dict(config=config, seed=seed, tokens=tokens, mask=mask, positions=positions, logits=logits,
                base_logits=base_logits, checksum=float(sum(np.float64(t).sum() for t in tensors.values())))


def main() -> None:
    import peft
    import torch
    import transformers

    FIXTURE_DIR.mkdir(parents=True, exist_ok=True)
    meta = {"generated_by": "benchmarks/lm_lora_fixture.py", "torch": torch.__version__,
            "transformers": transformers.__version__, "peft": peft.__version__, "numpy": np.__version__,
            "cases": {}}
    arrays = {}
    for name in CASES:
        folder = FIXTURE_DIR / f"lora_peft_{name}"
        shutil.rmtree(folder, ignore_errors=True)
        ref = reference(name, folder)
        moved = np.abs(ref["logits"] - ref["base_logits"]).max()
        meta["cases"][name] = {"hf_config": ref["config"].to_hf(), "seed": ref["seed"],
                               "weights_checksum": ref["checksum"], "adapter": folder.name,
                               "peft_lora_config": CASES[name][2], "max_logit_change_from_adapter": float(moved)}
        for key in ("tokens", "mask", "positions", "logits"):
            arrays[f"{name}/{key}"] = ref[key].astype(np.float32 if key == "logits" else np.int32)
        print(f"{name}: logits {ref['logits'].shape}, adapter moves logits by up to {moved:.3f}, "
              f"{sum(f.stat().st_size for f in folder.iterdir())} bytes in {folder.name}/")
    (FIXTURE_DIR / "lora_peft.json").write_text(json.dumps(meta, indent=2) + "\n")
    np.savez_compressed(FIXTURE_DIR / "lora_peft.npz", **arrays)
    print(f"wrote {FIXTURE_DIR}/lora_peft.json, lora_peft.npz and lora_peft_<case>/")


if __name__ == "__main__":
    main()
