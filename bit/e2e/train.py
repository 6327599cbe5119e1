"""BIT's end-to-end stage: `run(config, workdir)` is `iclr26 run bit_e2e`.

Stages, each a `core.train.fit` run in its own subfolder of the run folder (checkpoints, metrics.jsonl; a rerun
resumes and a finished stage is restored, not retrained):
  lm_text/      next-token pretraining of a small LM on the generator's text (disjoint from the neural sentences)
  lm_speech/    kind=speech: that LM (all of it) and an audio projector learn to transcribe simulated speech;
                kind=text: as many more steps on text (same compute, no speech)
  encoder_ssl/  encoder_init=pretrained: span-masked reconstruction on the unlabelled pretraining sessions
  encoder_ctc/  encoder_init=pretrained or ctc: phoneme CTC on the labelled sentences
  e2e/          the projector, InfoNCE heads and LoRA adapters (and the encoder, when trained), LM frozen
Then greedy and beam decoding of the test sentences (WER, n-best oracle WER), the cascade's WER for the CTC
encoder, and one-sentence latencies end to end and through the cascade.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from bit import train as cascade_train
from bit.e2e import data as data_lib
from bit.e2e.configs import Config
from bit.e2e.losses import Layout, lora_config, make_e2e_loss, make_speech_loss
from bit.e2e.metrics import wer_scores
from bit.e2e.model import Bridge, assemble, patch_mask, pooled
from core import train as core_train
from core.config import ConfigError
from core.data import ArrayLoader
from core.lm import lora as lora_lib
from core.lm import model as lm_model
from core.lm.beam import BeamConfig, beam_search
from core.lm.configs import LMConfig
from core.lm.generate import SamplingConfig, generate
from core.lm.losses import next_token_loss
from core.lm.tokenizer import Tokenizer, load_tokenizer

ENCODER_KEYS = ("x", "length", "session", "dataset")


@dataclasses.dataclass
class LanguageModel:
    tokenizer: Tokenizer
    config: LMConfig
    graphdef: nnx.GraphDef
    params: Any
    records: dict[str, list[dict]]


@dataclasses.dataclass
class NeuralEncoder:
    graphdef: nnx.GraphDef
    params: Any
    records: dict[str, list[dict]]


def lm_stage_config(config: Config, stage: str) -> dict:
    """What an LM stage depends on (its checkpoints are refused under anything else, and reused across
    end-to-end settings): the LM, the simulator and data that make its text and speech, the patch size."""
    b = config.base
    return {"lm": config.lm, "sim": b.sim, "data": b.data, "patch": b.model.patch, "seed": b.train.seed,
            "stage": stage}


def _schedule(lr: float, steps: int, warmup: int) -> optax.Schedule:
    steps = max(steps, 2)
    return optax.warmup_cosine_decay_schedule(0.0, lr, min(warmup, steps - 1), steps, lr * 0.05)


def _fit(params, tx, loss_fn, arrays, *, steps, batch_size, workdir, key, config, log_every, schedule=None,
         frozen=None, progress_bar=True) -> tuple[Any, list[dict]]:
    """One stage through core.train.fit: shuffled batches of `arrays`, checkpoints in `workdir`."""
    loader = ArrayLoader(arrays, min(batch_size, len(next(iter(arrays.values())))), seed=int(
        jax.random.randint(key, (), 0, 2 ** 31 - 1)))
    state = core_train.init_train_state(params, tx, key, frozen=frozen)
    step = core_train.make_train_step(loss_fn, tx, schedule=schedule)
    state, records = core_train.fit(state, step, loader, num_steps=steps, workdir=workdir, config=config,
                                    log_every=min(log_every, steps), ckpt_every=min(steps, 500),
                                    progress_bar=progress_bar)
    return state.params, records


# --- the language model ------------------------------------------------------------------------------------

def make_lm_config(config: Config, tok: Tokenizer) -> LMConfig:
    lm = config.lm
    return LMConfig(architecture="qwen2", vocab_size=tok.vocab_size, hidden_size=lm.hidden_size,
                    intermediate_size=lm.intermediate_size, num_layers=lm.num_layers, num_heads=lm.num_heads,
                    num_kv_heads=lm.num_kv_heads, head_dim=lm.hidden_size // lm.num_heads, tie_word_embeddings=True,
                    max_position_embeddings=1024, eos_token_id=tok.eos_id)


def language_model(config: Config, lm_text: list[str], workdir: pathlib.Path, *, seed: int,
                   progress_bar: bool = True) -> LanguageModel:
    """The LM of `config.lm`: loaded from `lm.path`, or trained here on `lm_text` (then, for kind=speech, on
    simulated speech of the same text). The tokenizer is saved in `workdir` and reused on resume."""
    lm = config.lm
    workdir.mkdir(parents=True, exist_ok=True)
    if lm.path:
        from core.lm.weights import load_hf
        lm_config, graphdef, params = load_hf(lm.path)
        return LanguageModel(data_lib.build_tokenizer(lm, lm_text), lm_config, graphdef, params, {})
    if lm.text_steps + lm.speech_steps == 0:
        raise ConfigError("lm.text_steps=0 and lm.speech_steps=0 with lm.path='': expected a local LM folder in "
                          "lm.path or steps to train one here")
    tok_path = workdir / "tokenizer.json"
    tok = load_tokenizer(tok_path) if tok_path.exists() else data_lib.build_tokenizer(lm, lm_text)
    tok.save(tok_path)
    lm_config = make_lm_config(config, tok)
    key = jax.random.key(seed)
    k_init, k_text, k_speech = jax.random.split(key, 3)
    graphdef, params = lm_model.init(lm_config, k_init)
    length = data_lib.sentence_length(tok, lm_text) + 1
    rows = data_lib.text_rows(tok, lm_text, length)
    text_steps = lm.text_steps + (lm.speech_steps if lm.kind == "text" else 0)
    records: dict[str, list[dict]] = {}
    if text_steps:
        sched = _schedule(lm.lr, text_steps, max(text_steps // 20, 1))
        tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))
        params, records["lm_text"] = _fit(params, tx, next_token_loss(graphdef), rows, steps=text_steps,
                                          batch_size=lm.batch_size, workdir=workdir / "lm_text", key=k_text,
                                          config=lm_stage_config(config, "text"), log_every=50, schedule=sched,
                                          progress_bar=progress_bar)
    if lm.kind == "speech" and lm.speech_steps:
        params, records["lm_speech"] = _speech_stage(config, tok, lm_config, graphdef, params, lm_text,
                                                     workdir / "lm_speech", k_speech, progress_bar)
    return LanguageModel(tok, lm_config, graphdef, params, records)


def _speech_stage(config, tok, lm_config, graphdef, params, lm_text, workdir, key, progress_bar):
    """The audio-LLM analogue: the whole LM and an audio projector learn speech -> text transcription."""
    lm, base = config.lm, config.base
    patch, frames = base.model.patch, -(-base.sim.max_bins // base.model.patch)
    rng = np.random.default_rng([int(jax.random.randint(key, (), 0, 2 ** 31 - 1)), 5])
    texts = [lm_text[i] for i in rng.permutation(len(lm_text))[:min(len(lm_text), 6000)]]
    table = data_lib.phone_table(lm, seed=base.sim.seed)
    x, frame_mask = data_lib.speech_batch(texts, table, rng, lm=lm, patch=patch, frames=frames,
                                          phone_bins=base.sim.phone_bins, sil_bins=base.sim.sil_bins)
    target, target_mask = data_lib.encode_sentences(tok, texts, data_lib.sentence_length(tok, texts))
    open_ids, close_ids = data_lib.delimiter_ids(tok, "speech")
    k_bridge, k_fit = jax.random.split(key)
    bridge_graphdef, bridge = nnx.split(Bridge(lm.speech_dim, lm_config.hidden_size, projector="mlp",
                                               contrastive_dim=1, temperature=1.0, rngs=nnx.Rngs(k_bridge)), nnx.Param)
    layout = Layout(graphdef, bridge_graphdef, open_ids, close_ids, data_lib.prompt_ids(tok, "speech"))
    sched = _schedule(lm.lr, lm.speech_steps, max(lm.speech_steps // 20, 1))
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))
    out, records = _fit({"lm": params, "bridge": bridge}, tx, make_speech_loss(layout),
                        {"frames": x, "frame_mask": frame_mask, "target": target, "target_mask": target_mask},
                        steps=lm.speech_steps, batch_size=lm.batch_size, workdir=workdir, key=k_fit,
                        config=lm_stage_config(config, "speech"), log_every=50, schedule=sched,
                        progress_bar=progress_bar)
    return out["lm"], records


# --- the neural encoder --------------------------------------------------------------------------------------

def neural_encoder(config: Config, data: dict, workdir: pathlib.Path, *, seed: int,
                   progress_bar: bool = True) -> NeuralEncoder:
    """BIT's encoder for `e2e.encoder_init`: SSL then CTC ("pretrained"), CTC only ("ctc") or random ("scratch"),
    through the cascade's stages (`bit.train.train_encoder`) in `encoder_ssl/` and `encoder_ctc/`."""
    init = config.e2e.encoder_init
    graphdef, params, records = cascade_train.train_encoder(
        config.base, data, workdir, seed=seed, pretrain=init == "pretrained", finetune=init != "scratch",
        stage_dirs=("encoder_ssl", "encoder_ctc"), fingerprint={"base": config.base, "encoder_init": init},
        progress_bar=progress_bar)
    names = {"pretrain": "encoder_ssl", "finetune": "encoder_ctc"}
    return NeuralEncoder(graphdef, params, {names[k]: v for k, v in records.items()})


def labelled_count(config: Config, data: dict) -> int:
    return min(config.base.data.labelled, len(data["train"]["x"]))


# --- the end-to-end stage ------------------------------------------------------------------------------------

def layout_for(config: Config, lm: LanguageModel, encoder_width: int, key: jax.Array) -> tuple[Layout, Any]:
    """The row layout and fresh bridge parameters (projector + InfoNCE heads) for the neural modality."""
    e = config.e2e
    bridge_graphdef, bridge = nnx.split(Bridge(encoder_width, lm.config.hidden_size, projector=e.projector,
                                               contrastive_dim=e.contrastive_dim, temperature=e.temperature,
                                               rngs=nnx.Rngs(key)), nnx.Param)
    open_ids, close_ids = data_lib.delimiter_ids(lm.tokenizer, "neural")
    prompt = data_lib.prompt_ids(lm.tokenizer, "neural")
    return Layout(lm.graphdef, bridge_graphdef, open_ids, close_ids, prompt), bridge


def e2e_rows(config: Config, lm: LanguageModel, arrays: dict, texts: list[str], length: int) -> dict[str, np.ndarray]:
    target, target_mask = data_lib.encode_sentences(lm.tokenizer, texts, length)
    return {**{k: arrays[k][:len(texts)] for k in ENCODER_KEYS}, "target": target, "target_mask": target_mask}


def e2e_setup(config: Config, data: dict, lm: LanguageModel, encoder: NeuralEncoder, key: jax.Array):
    """(layout, params, frozen, optimizer, schedule, rows) of the end-to-end stage: fresh bridge and adapters,
    the encoder trained (a copy) or frozen, AdamW per group (the encoder at its own rate), the labelled rows."""
    e = config.e2e
    k_bridge, k_lora = jax.random.split(key)
    layout, bridge = layout_for(config, lm, config.base.model.d_model, k_bridge)
    adapters = lora_lib.init_lora(lm.config, lora_config(config), k_lora)
    n = labelled_count(config, data)
    texts = data["train_text"][:n]
    rows = e2e_rows(config, lm, data["train"], texts, data_lib.sentence_length(lm.tokenizer, texts))
    params = {"bridge": bridge, "lora": adapters}
    frozen = {"lm": lm.params}
    if e.train_encoder:  # a copy: the step donates what it trains, and the CTC encoder is still needed
        params["encoder"] = jax.tree.map(jnp.copy, encoder.params)
    else:
        frozen["encoder"] = encoder.params
    sched = _schedule(e.lr, e.steps, e.warmup)
    parts = {"bridge": optax.adamw(sched, weight_decay=e.weight_decay),
             "lora": optax.adamw(sched, weight_decay=e.weight_decay)}
    if e.train_encoder:
        parts["encoder"] = optax.adamw(_schedule(e.encoder_lr, e.steps, e.warmup), weight_decay=e.weight_decay)
    tx = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.multi_transform(parts, {k: jax.tree.map(lambda _, k=k: k, v) for k, v in params.items()}))
    return layout, params, frozen, tx, sched, rows


def train_e2e(config: Config, data: dict, lm: LanguageModel, encoder: NeuralEncoder, workdir: pathlib.Path, *,
              seed: int, progress_bar: bool = True) -> tuple[Layout, dict, list[dict]]:
    """Projector, InfoNCE heads and LoRA adapters (and the encoder unless frozen) on the labelled sentences,
    through core.train.fit. Returns (layout, trained params {"bridge", "lora", "encoder"}, records)."""
    k_setup, k_fit = jax.random.split(jax.random.key(seed))
    layout, params, frozen, tx, sched, rows = e2e_setup(config, data, lm, encoder, k_setup)
    e = config.e2e
    trained, records = _fit(params, tx, make_e2e_loss(layout, encoder.graphdef, config), rows, steps=e.steps,
                            batch_size=e.batch_size, workdir=workdir / "e2e", key=k_fit, config=config,
                            log_every=e.log_every, schedule=sched, frozen=frozen, progress_bar=progress_bar)
    if "encoder" not in trained:
        trained = {**trained, "encoder": encoder.params}
    return layout, trained, records


def train_e2e_seeds(config: Config, data: dict, lm: LanguageModel, encoders: list[NeuralEncoder],
                    seeds: list[int], *, chunk: int = 100) -> tuple[Layout, list[dict], dict[str, np.ndarray]]:
    """The same stage for several seeds at once (the benchmark's path): one program, the step under
    `lax.scan` and `vmap` over seeds (encoder i with seed i), the LM and the rows shared; batches are drawn on
    device with replacement. Returns (layout, per-seed params, per-seed metric curves (seeds, steps))."""
    e = config.e2e
    setups = [e2e_setup(config, data, lm, enc, jax.random.split(jax.random.key(s))[0])
              for enc, s in zip(encoders, seeds)]
    layout, _, frozen, tx, _, rows = setups[0]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *[s[1] for s in setups])
    loss_fn = make_e2e_loss(layout, encoders[0].graphdef, config)
    step_fn = core_train.make_train_step(loss_fn, tx, donate=False)
    rows = {k: jnp.asarray(v) for k, v in rows.items()}
    n = len(rows["target"])

    def init(params, key):
        return core_train.init_train_state(params, tx, key)

    def run_chunk(state, frozen, rows, length):
        def body(state, _):
            idx = jax.random.randint(jax.random.fold_in(jax.random.fold_in(state.key, 1), state.step),
                                     (e.batch_size,), 0, n)
            state = state._replace(frozen=frozen)
            state, metrics = step_fn(state, {k: v[idx] for k, v in rows.items()})
            return state._replace(frozen=None), metrics
        return jax.lax.scan(body, state, None, length=length)

    keys = jnp.stack([jax.random.split(jax.random.key(s))[1] for s in seeds])
    state = jax.vmap(init)(stacked, keys)
    run = jax.jit(jax.vmap(run_chunk, in_axes=(0, None, None, None)), static_argnums=3)
    curves: dict[str, list] = {}
    for done in core_train.progress(range(0, e.steps, chunk), desc=f"e2e x{len(seeds)} seeds"):
        state, metrics = run(state, frozen, rows, min(chunk, e.steps - done))
        for k, v in metrics.items():
            curves.setdefault(k, []).append(np.asarray(v))
    params = [jax.tree.map(lambda x, i=i: x[i], state.params) for i in range(len(seeds))]
    if not e.train_encoder:
        params = [{**p, "encoder": enc.params} for p, enc in zip(params, encoders)]
    return layout, params, {k: np.concatenate(v, axis=1) for k, v in curves.items()}


# --- decoding ------------------------------------------------------------------------------------------------

class SentenceDecoder:
    """Neural trials -> sentences with the trained end-to-end model (greedy or beam search), batch by batch."""

    def __init__(self, config: Config, lm: LanguageModel, layout: Layout, encoder_graphdef: nnx.GraphDef,
                 params: dict):
        self.config, self.lm, self.layout = config, lm, layout
        self.lm_params = lora_lib.merge(lm.params, params["lora"], lora_config(config))  # same logits, faster
        self.params = params
        patch = config.base.model.patch

        @jax.jit
        def prefix(enc_params, bridge_params, lm_params, batch):
            encoder = nnx.merge(encoder_graphdef, enc_params)
            h = encoder.encode(batch["x"], batch["session"], batch["length"], None, None, batch["dataset"])
            bridge = nnx.merge(layout.bridge_graphdef, bridge_params)
            tokens = bridge.projector(h)
            valid = patch_mask(batch["length"], h.shape[1], patch)
            seq = assemble(layout.lm_graphdef, lm_params, tokens, valid, layout.open_ids, layout.close_ids,
                           layout.prompt)
            return seq.embeds, seq.mask, bridge.neural_head(pooled(tokens, valid))

        self._prefix = prefix

    def _batches(self, arrays: dict, batch_size: int):
        n = len(arrays["x"])
        for i in range(0, n, batch_size):
            batch = {k: np.asarray(arrays[k][i:i + batch_size]) for k in ENCODER_KEYS}
            m = len(batch["x"])
            if m < batch_size:  # pad to the compiled batch
                batch = {k: np.concatenate([v, np.repeat(v[-1:], batch_size - m, 0)]) for k, v in batch.items()}
            yield m, batch

    def _text(self, ids: np.ndarray, length: int) -> str:
        ids = [int(t) for t in ids[:length] if int(t) != self.lm.tokenizer.eos_id]
        return self.lm.tokenizer.decode(ids).strip()

    def decode(self, arrays: dict, method: str, batch_size: int | None = None) -> list[list[str]]:
        """Per trial, the decoded sentence list: [greedy] or the beam's n-best (best first)."""
        d = self.config.decode
        batch_size = batch_size or d.batch_size
        eos = self.lm.tokenizer.eos_id
        out: list[list[str]] = []
        for m, batch in self._batches(arrays, batch_size):
            embeds, mask, _ = self._prefix(self.params["encoder"], self.params["bridge"], self.lm_params, batch)
            if method == "greedy":
                g = generate(self.lm.graphdef, self.lm_params, None, mask, jax.random.key(0),
                             SamplingConfig(max_new_tokens=d.max_new_tokens, stop_tokens=(eos,),
                                            pad_id=self.lm.tokenizer.pad_id or 0), inputs_embeds=embeds)
                toks, lens = np.asarray(g.tokens), np.asarray(g.lengths)
                out += [[self._text(toks[i], lens[i])] for i in range(m)]
            else:
                b = beam_search(self.lm.graphdef, self.lm_params, None, mask,
                                BeamConfig(beam_size=d.beam, max_new_tokens=d.max_new_tokens, eos_tokens=(eos,),
                                           length_penalty=d.length_penalty, n_best=d.n_best,
                                           pad_id=self.lm.tokenizer.pad_id or 0), inputs_embeds=embeds)
                toks, lens = np.asarray(b.tokens), np.asarray(b.lengths)
                out += [[self._text(toks[i, j], lens[i, j]) for j in range(d.n_best)] for i in range(m)]
        return out

    def neural_embeddings(self, arrays: dict) -> np.ndarray:
        """The InfoNCE head's embedding of each trial's pooled neural tokens (N, contrastive_dim)."""
        outs = []
        for m, batch in self._batches(arrays, self.config.decode.batch_size):
            outs.append(np.asarray(self._prefix(self.params["encoder"], self.params["bridge"], self.lm_params,
                                                batch)[2])[:m])
        return np.concatenate(outs)


def latency(config: Config, decoder: SentenceDecoder, arrays: dict, cascade: tuple | None) -> dict[str, float]:
    """Seconds per sentence, one sentence at a time after a warm-up: end to end (greedy, beam) and, when the
    encoder has a CTC head, the cascade (CTC log-probs + the lexicon beam search with the word 3-gram)."""
    n = min(config.latency_sentences, len(arrays["x"]))
    one = lambda i: {k: arrays[k][i:i + 1] for k in ENCODER_KEYS}  # noqa: E731
    out = {}
    for method in ("greedy", "beam"):
        decoder.decode(one(0), method, batch_size=1)  # compile
        start = time.perf_counter()
        for i in range(n):
            decoder.decode(one(i), method, batch_size=1)
        out[f"latency_e2e_{method}_s"] = (time.perf_counter() - start) / n
    if cascade is not None:
        logprobs_fn, enc_params, word_decoder = cascade
        logprobs_fn(enc_params, one(0))
        start = time.perf_counter()
        for i in range(n):
            lp, frames = logprobs_fn(enc_params, one(i))
            word_decoder.decode(lp[0], frames[0])
        out["latency_cascade_s"] = (time.perf_counter() - start) / n
    return out


def evaluate(config: Config, lm: LanguageModel, layout: Layout, encoder: NeuralEncoder, params: dict,
             data: dict, *, workdir: pathlib.Path, with_latency: bool = True) -> dict[str, Any]:
    """WER of greedy and beam decoding (first hypothesis and n-best oracle) on the test sentences; the cascade's
    WER and PER on the CTC encoder (before end-to-end training) when it has one; latencies."""
    decoder = SentenceDecoder(config, lm, layout, encoder.graphdef, params)
    texts = data["test_text"]
    result: dict[str, Any] = {}
    hyps = {}
    for method in ("greedy", "beam"):
        hyps[method] = decoder.decode(data["test"], method)
        scores = wer_scores(texts, hyps[method])
        result[f"wer_{method}"] = scores["wer"]
        if method == "beam":
            result["wer_beam_oracle"] = scores["wer_oracle"]
    result["examples"] = [{"truth": t, "greedy": g[0], "beam_nbest": b}
                          for t, g, b in zip(texts, hyps["greedy"], hyps["beam"])][:config.show]
    cascade = None
    if config.e2e.encoder_init != "scratch":
        from bit.decode import phone_lm_table
        base = config.base
        logprobs = cascade_train.make_logprobs(base, encoder.graphdef)
        lp, frames = logprobs(encoder.params, data["test"])
        lexicon, word_decoder = cascade_train.make_word_decoder(base, data["lm_text"], workdir)
        ev = cascade_train.evaluate(base, lp, frames, data["test"], texts, table=phone_lm_table(),
                                    word_decoder=word_decoder, lexicon=lexicon)
        result.update({f"cascade_{k}": v for k, v in ev.items() if not k.endswith("_hyps")})
        cascade = (cascade_train.make_logprobs(base, encoder.graphdef, batch_size=1), encoder.params, word_decoder)
    if with_latency:
        result.update(latency(config, decoder, data["test"], cascade))
    return result


def run(config: Config, workdir: pathlib.Path) -> dict[str, Any]:
    """`iclr26 run bit_e2e`: simulate, train the LM and the encoder, train end to end, decode the test set."""
    from core.plots import bar_plot, line_plot

    workdir = pathlib.Path(workdir)
    start = time.time()
    seed = config.base.train.seed
    data = cascade_train.build_data(config.base, workdir)
    lm = language_model(config, data["lm_text"], workdir / "lm", seed=seed)
    encoder = neural_encoder(config, data, workdir, seed=seed)
    layout, params, records = train_e2e(config, data, lm, encoder, workdir, seed=seed)
    result = evaluate(config, lm, layout, encoder, params, data, workdir=workdir)
    curves = {}
    for stage, rows in {**lm.records, **encoder.records, "e2e": records}.items():
        curves[stage] = ([r["step"] for r in rows], [r["loss"] for r in rows])
    line_plot(workdir / "losses.png", curves, title="BIT end to end: stage losses", xlabel="step", ylabel="loss",
              logy=True)
    wers = {k: result[k] for k in ("wer_greedy", "wer_beam", "wer_beam_oracle", "cascade_wer_cascade")
            if k in result}
    bar_plot(workdir / "wer.png", wers, title="test WER", ylabel="WER")
    e = config.e2e
    print(f"\nBIT end to end ({e.encoder_init} encoder, {config.lm.kind} LM, InfoNCE weight {e.contrastive_weight}), "
          f"{labelled_count(config, data)} labelled sentences: WER {result['wer_greedy']:.3f} greedy / "
          f"{result['wer_beam']:.3f} beam (n-best oracle {result['wer_beam_oracle']:.3f})"
          + (f"; cascade {result['cascade_wer_cascade']:.3f}" if "cascade_wer_cascade" in result else ""))
    for ex in result["examples"]:
        print(f"  truth: {ex['truth']}\n  beam:  {ex['beam_nbest'][0]}")
    final = records[-1] if records else {}
    result.update(labelled=labelled_count(config, data), wall_seconds=time.time() - start,
                  e2e_final_ce=final.get("ce"), e2e_final_info_nce=final.get("info_nce"))
    (workdir / "decoded.json").write_text(json.dumps(result["examples"], indent=1))
    core_train.write_metrics(workdir, result)
    return result
