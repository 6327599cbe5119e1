"""A minimal OpenAI-compatible chat-completions server over any adapter (a `core.lm` model by default).

It exists so the HTTP adapter can be tested end to end without the internet, and so a model trained here
can be evaluated by the same client a user points at vLLM. Binds to 127.0.0.1 unless told otherwise.
Endpoints: `POST /v1/chat/completions` (the last user message is the prompt), `GET /v1/models`.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve(adapter, *, host: str = "127.0.0.1", port: int = 0, model_name: str = "cf-small"
          ) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Start serving in a daemon thread; returns (server, thread). `server.server_address` has the port;
    stop with `server.shutdown(); server.server_close()`."""
    lock = threading.Lock()  # one generation at a time (the adapter's compiled programs are shared)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, code: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 (http.server API)
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": model_name, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):  # noqa: N802
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                req = json.loads(self.rfile.read(length).decode())
                users = [m["content"] for m in req["messages"] if m.get("role") == "user"]
                if not users:
                    raise ValueError("expected at least one user message")
            except (ValueError, KeyError, TypeError) as err:
                self._send(400, {"error": {"message": f"bad request: {err}"}})
                return
            with lock:
                text = adapter.complete([users[-1]])[0]
            self._send(200, {
                "id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion", "created": int(time.time()),
                "model": req.get("model", model_name),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text or ""},
                             "finish_reason": "stop"}],
            })

    server = ThreadingHTTPServer((host, port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread
