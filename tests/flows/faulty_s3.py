"""A fault-injecting HTTP proxy in front of the moto S3 server (test helper).

Every ``fail_every``-th request is answered ``503 SlowDown`` (the S3 throttling error) without
reaching the server; the rest are forwarded unchanged, and the bytes of their answers' bodies
are counted per (method, path) in ``body_bytes``. Loopback only."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b'<Message>Please reduce your request rate.</Message></Error>')


class FaultProxy:
    """``rule(method, path, n)`` (optional) picks the requests to fail instead of every
    ``fail_every``-th: ``n`` is how many times this method and path were seen before."""

    def __init__(self, upstream: str, fail_every: int = 4, rule=None):
        self.upstream = urlparse(upstream)
        self.fail_every = fail_every
        self.rule = rule
        self.seen: dict[tuple[str, str], int] = {}
        self.failed: list[tuple[str, str]] = []
        self.requests = 0
        self.failures = 0
        self.body_bytes: dict[tuple[str, str], int] = {}  # bytes of forwarded answers per (method, path)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _handle(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                with proxy._lock:
                    proxy.requests += 1
                    key = (self.command, self.path.split("?", 1)[0])
                    n = proxy.seen.get(key, 0)
                    proxy.seen[key] = n + 1
                    fail = (proxy.rule(*key, n) if proxy.rule is not None
                            else proxy.requests % proxy.fail_every == 0)
                    proxy.failures += fail
                    if fail:
                        proxy.failed.append(key)
                if fail:
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(SLOWDOWN)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(SLOWDOWN)
                    return
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = f"{proxy.upstream.hostname}:{proxy.upstream.port}"
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                # a HEAD answer has no body: pass on the object's own length (S3 clients read
                # the size from it, e.g. a Parquet footer read), not the empty body's
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                with proxy._lock:  # counted before the client has the answer
                    proxy.body_bytes[key] = proxy.body_bytes.get(key, 0) + len(data)
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
