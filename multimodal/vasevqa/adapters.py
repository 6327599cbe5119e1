"""Captioners for the evaluation: an OpenAI-compatible chat endpoint (external VLMs: a local vLLM serving
Qwen2.5-VL, or a hosted API) and the project's small VaseVLM.

The endpoint adapter sends the six views as base64 JPEG data URLs followed by the caption prompt (our own
English wording of the released prompt's asks: shape, technique, date, decoration, find-spot, one caption
only), temperature 0, 256 new tokens as the released scripts; a failed call becomes an empty caption and is
counted. `caption_file` writes the released generated-caption JSON for `metrics.evaluate_files`.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import os
import pathlib
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from core.config import BadInputError
from multimodal.vasevqa import render

ENDPOINT_PROMPT = ("These are {n} views ({views}) of a 3D model of an ancient Greek vase. Write one short, "
                   "accurate caption in the style of a museum label, for example \"Attic black-figure amphora, "
                   "c. 550-525 BCE, decorated with a meander band on the shoulder; attributed to the Antimenes "
                   "Painter.\" Name the vessel shape, the painting technique, an approximate date, the main "
                   "decoration and, if you can tell, the workshop or painter. Reply with the caption only.")


def jpeg_data_url(image: np.ndarray) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.asarray(image, np.uint8)).save(buffer, format="JPEG", quality=95)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


def message_content(views: np.ndarray, prompt: str = ENDPOINT_PROMPT) -> list[dict[str, Any]]:
    """The user message: six image parts in VIEWS order, then the text."""
    views = np.asarray(views)
    if views.shape[0] != len(render.VIEWS) or views.ndim != 4:
        raise BadInputError(f"views {views.shape}: expected (6, H, W, 3) in the order {render.VIEWS}")
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": jpeg_data_url(v)}} for v in views]
    parts.append({"type": "text", "text": prompt.format(n=len(views), views=", ".join(render.VIEWS))})
    return parts


def _post(url: str, body: dict, headers: dict, timeout: float) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read().decode())


@dataclasses.dataclass
class EndpointCaptioner:
    """`base_url` of an OpenAI-compatible API (e.g. http://localhost:8000/v1), `model` its model name; the key
    from `api_key` or the environment variable `api_key_env` (none needed for a local server). `post` is the
    transport (replaceable in tests)."""

    base_url: str
    model: str
    api_key: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    max_tokens: int = 256
    temperature: float = 0.0
    timeout: float = 120.0
    post: Callable[[str, dict, dict, float], dict] = _post
    failures: int = 0

    @property
    def name(self) -> str:
        return f"endpoint:{self.model}"

    def request(self, views: np.ndarray) -> tuple[str, dict, dict]:
        headers = {"Content-Type": "application/json"}
        key = self.api_key or os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body = {"model": self.model, "messages": [{"role": "user", "content": message_content(views)}],
                "temperature": self.temperature, "max_tokens": self.max_tokens}
        return self.base_url.rstrip("/") + "/chat/completions", body, headers

    def caption(self, views: np.ndarray) -> str:
        url, body, headers = self.request(views)
        try:
            reply = self.post(url, body, headers, self.timeout)
            return str(reply["choices"][0]["message"]["content"]).strip()
        except Exception:  # noqa: BLE001 - a failed call is an empty caption, counted
            self.failures += 1
            return ""

    def captions(self, all_views: Sequence[np.ndarray]) -> list[str]:
        return [self.caption(v) for v in all_views]


def caption_file(path: str | pathlib.Path, image_names: Sequence[str], captions: Sequence[str], data_by: str
                 ) -> pathlib.Path:
    if len(image_names) != len(captions):
        raise BadInputError(f"{len(captions)} captions for {len(image_names)} images: expected one per image")
    path = pathlib.Path(path)
    path.write_text(json.dumps([{"images": [n], "caption": c, "data_by": data_by}
                                for n, c in zip(image_names, captions)], indent=1, ensure_ascii=False))
    return path
