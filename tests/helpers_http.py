"""A throwaway HTTP server on 127.0.0.1 for backend tests: POST bodies go to a function."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

# respond(path, headers, json body) -> (status, payload bytes, extra headers), or None: never
# answer (the connection stays open until the server is stopped)
Responder = Callable[[str, dict, dict], "tuple[int, bytes, dict] | None"]


class LocalServer:
    """``with LocalServer(respond) as srv:`` serves ``srv.url`` (ending in /v1) until the block
    ends. ``respond`` is called under a lock, so it may keep plain counters and lists.

    ``models``: the ``data`` list of ``GET /v1/models`` (None: that path answers 404).
    ``stop_listening()`` closes the listening socket while requests already accepted stay open
    without an answer, like a server that was told to stop but still holds its connections."""

    def __init__(self, respond: Responder, models: list[dict] | None = None):
        lock = threading.Lock()
        self.release = threading.Event()   # set when the server stops: hanging requests end
        self.gets = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _send(self, status: int, payload: bytes, headers: dict) -> None:
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):
                with lock:
                    server.gets += 1
                if models is None or self.path.rstrip("/") != "/v1/models":
                    self._send(404, b'{"error": {"message": "not found"}}', {})
                else:
                    self._send(200, json.dumps({"object": "list", "data": models}).encode(), {})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    answer = respond(self.path, dict(self.headers), body)
                if answer is None:
                    server.release.wait()
                    self.close_connection = True
                    return
                self._send(*answer)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.02}, daemon=True)
        self._listening = True

    def stop_listening(self) -> None:
        """New connections are refused from now on; open ones get no answer."""
        if self._listening:
            self._listening = False
            self.httpd.shutdown()
            self.httpd.server_close()

    def __enter__(self) -> "LocalServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.stop_listening()


def chat_completion(contents: list[str], model: str = "local-model", prompt_tokens: int = 11,
                    completion_tokens: list[int] | None = None,
                    finish_reasons: list[str] | None = None) -> bytes:
    """A ``/chat/completions`` response body shaped like a real server's (the fields the
    ``openai`` package's ``ChatCompletion`` requires; tests/test_fakes_match_real.py validates
    it with that model when ``openai`` is installed), one choice per content."""
    tokens = completion_tokens or [5] * len(contents)
    reasons = finish_reasons or ["stop"] * len(contents)
    return json.dumps({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": i, "message": {"role": "assistant", "content": text},
                     "finish_reason": reason, "logprobs": None}
                    for i, (text, reason) in enumerate(zip(contents, reasons))],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": sum(tokens),
                  "total_tokens": prompt_tokens + sum(tokens)},
    }).encode()
