"""core.lm: a shared Qwen2/Llama-family decoder (model, HF weights, generation, hooks, tokenizer, kernels).

See core/lm/README.md. The `tiny_lm` experiment trains a small decoder from scratch on a synthetic task.
"""

from core.lm.cache import KVSection, export_kv, import_kv
from core.lm.chat import ChatTemplate, GenerationDefaults, apply_chat_template
from core.lm.configs import LMConfig, RopeScaling, TinyLMConfig, tiny_presets
from core.lm.generate import (
    DecodeState,
    GenerateOutput,
    SamplingConfig,
    append_tokens,
    continue_decoding,
    decode,
    extend_cache,
    generate,
    pad_prompts,
    prefill,
    sample_logits,
    start_state,
)
from core.lm.hooks import Capture, Hooks, PatchHead, PatchHeadAt, Steer
from core.lm.logprobs import chunked_logprobs, sequence_logprobs
from core.lm.lora import LoraConfig, LoraInputs, LoraWeights, init_lora, load_peft, merge, save_peft, unmerge
from core.lm.model import KVCache, Output, Transformer, abstract, apply, embed, init, init_cache, read_kv, write_kv
from core.lm.weights import load_hf, save_hf
from core.registry import Experiment


def _run(config, workdir):
    from core.lm.train import run

    return run(config, workdir)


EXPERIMENT = Experiment(
    name="tiny_lm",
    paper=None,
    title="core.lm: a tiny decoder trained from scratch on a synthetic task (reversal)",
    presets=tiny_presets(),
    run=_run,
    runtimes={"tiny": "~15 s on 2 CPU cores", "demo": "~1-2 min on 2 CPU cores"},
)

__all__ = [
    "ChatTemplate", "GenerationDefaults", "apply_chat_template",
    "LMConfig", "RopeScaling", "TinyLMConfig", "GenerateOutput", "SamplingConfig", "decode", "generate",
    "DecodeState", "append_tokens", "continue_decoding", "extend_cache", "start_state", "KVSection", "export_kv",
    "import_kv", "chunked_logprobs", "sequence_logprobs", "embed",
    "pad_prompts", "prefill", "sample_logits", "Capture", "Hooks", "PatchHead", "PatchHeadAt", "Steer", "KVCache",
    "Output",
    "Transformer", "abstract", "apply", "init", "init_cache", "read_kv", "write_kv", "load_hf", "save_hf",
    "LoraConfig", "LoraInputs", "LoraWeights", "init_lora", "load_peft", "merge", "save_peft", "unmerge",
    "EXPERIMENT",
]
