"""A throwaway HTTP server on 127.0.0.1 for backend tests: POST bodies go to a function."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

# respond(path, headers, json body) -> (status, payload bytes, extra headers)
Responder = Callable[[str, dict, dict], tuple[int, bytes, dict]]


class LocalServer:
    """``with LocalServer(respond) as srv:`` serves ``srv.url`` (ending in /v1) until the block
    ends. ``respond`` is called under a lock, so it may keep plain counters and lists."""

    def __init__(self, respond: Responder):
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    status, payload, headers = respond(self.path, dict(self.headers), body)
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> "LocalServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
