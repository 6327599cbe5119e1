"""Evaluate any model on the benchmark through an adapter, per split and variant, with confidence intervals.

Adapters turn prompts into completions:

- `LMAdapter`: a `core.lm` model (graphdef, params) and a tokenizer; batched, greedy, jitted generation with
  a KV cache (`core.lm.generate`); prompts are padded to fixed buckets and batches to a fixed size, so a whole
  evaluation compiles a handful of programs.
- `OpenAIChatAdapter`: any OpenAI-compatible `/v1/chat/completions` endpoint (vLLM, llama.cpp server, a hosted
  API, or `server.serve` here), standard library only: reasoning-model parameters, retries with backoff,
  bounded concurrency, a cache by prompt hash.

`evaluate` sends one prompt per (item, variant), parses the answer sets (`verify.parse_answer`) and reports exact
match (Wilson 95% interval) and macro F1 (normal 95% interval) per split and variant, plus the
interventional-minus-counterfactual gap.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from rl_tools.counterfactuals import export, verify
from rl_tools.counterfactuals.generate import VARIANTS, Item


class Adapter(Protocol):
    name: str

    def complete(self, prompts: Sequence[str]) -> list[str | None]:
        """One completion per prompt; None where the model could not answer (an error)."""


def _gen_lib():
    # `core.lm` re-exports the function `generate`, which shadows the submodule as a package attribute
    import importlib
    return importlib.import_module("core.lm.generate")


class LMAdapter:
    """Greedy generation with a `core.lm` model. `tokenizer` has encode(text) -> ids, decode(ids) -> text,
    pad_id and eos_id (the compact tokenizer here, or `core.lm.tokenizer.Tokenizer`)."""

    def __init__(self, graphdef, params, tokenizer, *, max_new_tokens: int = 12, batch_size: int = 64,
                 bucket: int = 32, name: str = "core.lm"):
        gen_lib = _gen_lib()
        self.graphdef, self.params, self.tok = graphdef, params, tokenizer
        self.batch_size, self.bucket, self.name = batch_size, bucket, name
        self.sampling = gen_lib.SamplingConfig(max_new_tokens=max_new_tokens, stop_tokens=(tokenizer.eos_id,),
                                               pad_id=tokenizer.pad_id or 0)

    def complete(self, prompts: Sequence[str]) -> list[str | None]:
        import jax
        gen_lib = _gen_lib()
        encoded = [self.tok.encode(p) for p in prompts]
        out: list[str | None] = [None] * len(prompts)
        # one padded length for the whole call and full batches: a single compiled program per call shape
        order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
        length = -(-max(len(e) for e in encoded) // self.bucket) * self.bucket if encoded else 0
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            batch = [encoded[i] for i in idx] + [encoded[idx[0]]] * (self.batch_size - len(idx))
            tokens, mask = gen_lib.pad_prompts(batch, pad_id=self.sampling.pad_id, length=length)
            res = gen_lib.generate(self.graphdef, self.params, tokens, mask, jax.random.key(0), self.sampling)
            toks = np.asarray(jax.device_get(res.tokens))
            for row, i in enumerate(idx):
                out[i] = self.tok.decode(toks[row].tolist())
        return out


REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")  # model names that take max_completion_tokens, no temperature
RETRY_STATUS = (408, 409, 425, 429, 500, 502, 503, 504)


class OpenAIChatAdapter:
    """POST {base_url}/chat/completions with one user message per prompt.

    - Reasoning models (`reasoning=True`, or by default a model name starting with o1/o3/o4/gpt-5) get
      `max_completion_tokens` and no `temperature` (those endpoints reject it); others get `max_tokens` and
      `temperature` (0 by default).
    - Retries: HTTP 408/409/425/429/5xx, connection errors and timeouts are retried up to `retries` times with
      exponential backoff (`backoff` * 2^attempt seconds, honouring a numeric Retry-After up to 60 s); any other
      HTTP error is final. A prompt that fails for good gives None and a line in `errors`.
    - At most `workers` requests are in flight at once (a thread pool of that size).
    - Answers are cached by the SHA-256 of (endpoint, model, request parameters, messages): in memory, and in
      the JSONL file `cache_path` when given (appended, read back on the next run), so a rerun sends only the
      prompts that have no answer yet.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, max_tokens: int = 256,
                 temperature: float | None = 0.0, timeout: float = 60.0, workers: int = 4, system: str | None = None,
                 reasoning: bool | None = None, retries: int = 4, backoff: float = 1.0,
                 cache_path: str | None = None, sleep: Callable[[float], None] | None = None):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url={base_url!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1")
        if workers < 1 or retries < 0 or max_tokens < 1:
            raise ValueError(f"workers={workers}, retries={retries}, max_tokens={max_tokens}: expected workers >= 1, "
                             "retries >= 0 and max_tokens >= 1")
        import threading
        import time as _time
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key, self.max_tokens = model, api_key, max_tokens
        self.temperature, self.timeout, self.workers, self.system = temperature, timeout, workers, system
        self.reasoning = model.lower().startswith(REASONING_PREFIXES) if reasoning is None else reasoning
        self.retries, self.backoff = retries, backoff
        self.sleep = sleep or _time.sleep
        self.name = f"openai:{model}"
        self.errors: list[str] = []
        self.requests = 0  # HTTP requests sent (retries included)
        self.cache: dict[str, str] = {}
        self.cache_path = cache_path
        self._lock = threading.Lock()
        if cache_path:
            import os
            if os.path.exists(cache_path):
                with open(cache_path) as fh:
                    for line in fh:
                        if line.strip():
                            row = json.loads(line)
                            self.cache[row["key"]] = row["content"]

    def body(self, prompt: str) -> dict[str, Any]:
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + \
            [{"role": "user", "content": prompt}]
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.reasoning:
            body["max_completion_tokens"] = self.max_tokens
        else:
            body["max_tokens"] = self.max_tokens
            if self.temperature is not None:
                body["temperature"] = self.temperature
        return body

    def cache_key(self, body: Mapping[str, Any]) -> str:
        import hashlib
        return hashlib.sha256(json.dumps({"url": self.url, **body}, sort_keys=True).encode()).hexdigest()

    def _post(self, body: dict) -> str:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        with self._lock:
            self.requests += 1
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            payload = json.loads(resp.read().decode())
        content = payload["choices"][0]["message"].get("content")
        if content is None:
            raise ValueError("the response has no message content")
        return content

    def _one(self, prompt: str) -> str | None:
        body = self.body(prompt)
        key = self.cache_key(body)
        with self._lock:
            if key in self.cache:
                return self.cache[key]
        last = ""
        for attempt in range(self.retries + 1):
            wait = self.backoff * 2 ** attempt
            try:
                content = self._post(body)
            except urllib.error.HTTPError as err:
                last = f"HTTPError {err.code}: {err.reason}"
                if err.code not in RETRY_STATUS:
                    break
                after = err.headers.get("Retry-After") if err.headers else None
                if after and after.strip().isdigit():
                    wait = min(float(after), 60.0)
            except (urllib.error.URLError, TimeoutError, OSError) as err:
                last = f"{type(err).__name__}: {err}"
            except (KeyError, IndexError, ValueError, TypeError) as err:
                last = f"bad response ({type(err).__name__}: {err})"
                break
            else:
                with self._lock:
                    self.cache[key] = content
                    if self.cache_path:
                        with open(self.cache_path, "a") as fh:
                            fh.write(json.dumps({"key": key, "content": content}) + "\n")
                return content
            if attempt < self.retries:
                self.sleep(wait)
        with self._lock:
            self.errors.append(last)
        return None

    def complete(self, prompts: Sequence[str]) -> list[str | None]:
        with concurrent.futures.ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(self._one, prompts))


# --- intervals ---------------------------------------------------------------------------------------

def wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a proportion k/n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_ci(values: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    n = len(values)
    if n < 2:
        return (0.0, 1.0)
    m = float(np.mean(values))
    half = z * float(np.std(values, ddof=1)) / math.sqrt(n)
    return (max(0.0, m - half), min(1.0, m + half))


# --- evaluation ----------------------------------------------------------------------------------------

PromptFn = Callable[[Item, str], str]


def evaluate(items: Mapping[str, Sequence[Item]] | Sequence[Item], adapter: Adapter, *,
             variants: Sequence[str] = ("interventional", "counterfactual"), prompt: PromptFn = export.question,
             keep_predictions: bool = False) -> dict[str, Any]:
    """Score `adapter` on every split and variant. Returns {"rows": [...], "predictions": [...]?}; a row has
    split, variant, n, em, em_lo, em_hi, f1, f1_lo, f1_hi, unparsed, errors."""
    for v in variants:
        if v not in VARIANTS:
            raise ValueError(f"variant={v!r}: expected one of {VARIANTS}")
    if not isinstance(items, Mapping):
        grouped: dict[str, list[Item]] = {}
        for it in items:
            grouped.setdefault(it.split, []).append(it)
        items = grouped
    jobs = [(split, v, it) for split, its in items.items() for v in variants for it in its]
    completions = adapter.complete([prompt(it, v) for _, v, it in jobs]) if jobs else []
    rows, preds = [], []
    for split in items:
        for v in variants:
            sel = [(it, c) for (s, vv, it), c in zip(jobs, completions) if s == split and vv == v]
            parsed = [verify.parse_answer(c) for _, c in sel]
            golds = [it.answer(v) for it, _ in sel]
            ems = [verify.exact_match(p, g) for p, g in zip(parsed, golds)]
            f1s = [verify.set_f1(p, g) for p, g in zip(parsed, golds)]
            n = len(sel)
            em_lo, em_hi = wilson(sum(ems), n)
            f1_lo, f1_hi = mean_ci(f1s)
            rows.append({"split": split, "variant": v, "n": n, "em": sum(ems) / max(n, 1), "em_lo": em_lo,
                         "em_hi": em_hi, "f1": sum(f1s) / max(n, 1), "f1_lo": f1_lo, "f1_hi": f1_hi,
                         "unparsed": sum(p is None for p in parsed) / max(n, 1),
                         "errors": sum(c is None for _, c in sel)})
            if keep_predictions:
                preds += [{"item_id": it.id, "split": split, "variant": v, "completion": c,
                           "parsed": sorted(p) if p is not None else None, "answer": list(g)}
                          for (it, c), p, g in zip(sel, parsed, golds)]
    out: dict[str, Any] = {"rows": rows, "adapter": getattr(adapter, "name", type(adapter).__name__)}
    if keep_predictions:
        out["predictions"] = preds
    return out


def gaps(rows: Sequence[Mapping[str, Any]], metric: str = "em") -> dict[str, float]:
    """interventional minus counterfactual `metric` per split (splits that have both)."""
    table = {(r["split"], r["variant"]): r[metric] for r in rows}
    return {s: table[(s, "interventional")] - table[(s, "counterfactual")]
            for s, v in table if v == "interventional" and (s, "counterfactual") in table}
