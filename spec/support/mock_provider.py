#!/usr/bin/env python3
"""A model provider for the specs: plays a script, records every request.

    python3 mock_provider.py --port-file FILE --parent PID

Listens on 127.0.0.1 (a port the system picks, written to FILE once it
listens) and speaks HTTP/1.1 with keep-alive. Any path and method is a
provider request: it is recorded and answered with the next step of the
script. The control endpoints:

    POST /_mock/script     a JSON array of steps replaces the script
    GET  /_mock/requests   every provider request so far, in order:
                           [{method, path, query, headers: {lower-case name: value},
                             body: text, json: the parsed body or null,
                             server_ms: the time it took here, from reading the body
                             to the answer's last byte}]
    POST /_mock/reset      clears the script and the records
    POST /_mock/shutdown   stops the server

A step: {status = 200, headers = {...}, json = value} (served as JSON), or
body = "text" (served as it is, with content_type), and optionally:
    delay_ms  wait before answering (cut short when the client leaves or the
              server stops)
    close     close the connection without an answer
    truncate  announce the whole body but send only this many bytes, then close
    expect    {path =, method =}: a request that differs gets 599 and a JSON
              error naming the difference, and is recorded with mismatch set
With the script used up, the answer is 500 with a JSON error.

It exits when the process PID is gone, and after an hour in any case, so a
spec that failed half-way never leaves it behind.
"""
import argparse
import json
import os
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

LIFETIME_S = 3600

lock = threading.Lock()
script = []
records = []
stopping = threading.Event()


def take_step():
    with lock:
        return script.pop(0) if script else None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def setup(self):
        super().setup()
        # headers and body go out in two writes: without this, Nagle's
        # algorithm and the client's delayed ACK hold the body for 40 ms
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send(self, status, body, content_type="application/json", headers=None, truncate=None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, str(value))
        if truncate is not None:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body if truncate is None else body[:truncate])
        self.wfile.flush()

    def send_json(self, status, value, headers=None):
        self.send(status, json.dumps(value).encode(), headers=headers)

    def client_gone(self):
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return self.connection.recv(1, 0x2) == b""   # MSG_PEEK
        except OSError:
            return True

    def handle_any(self):
        started = time.perf_counter()
        body = self.read_body()
        url = urlsplit(self.path)
        if url.path.startswith("/_mock/"):
            return self.control(url.path, body)
        text = body.decode("utf-8", "replace")
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = None
        record = {
            "method": self.command, "path": url.path, "query": url.query,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": text, "json": parsed,
        }
        with lock:
            records.append(record)
        step = take_step()
        if step is None:
            return self.send_json(500, {"error": {"message": "mock provider: no scripted response left for %s %s" % (self.command, url.path)}})
        expect = step.get("expect") or {}
        for field, got in (("path", url.path), ("method", self.command)):
            if field in expect and expect[field] != got:
                record["mismatch"] = True
                return self.send_json(599, {"error": {"message": "mock provider: expected %s %s, got %s" % (field, expect[field], got)}})
        delay = step.get("delay_ms", 0) / 1000.0
        end = time.monotonic() + delay
        while time.monotonic() < end:
            if stopping.is_set() or self.client_gone():
                self.close_connection = True
                return
            time.sleep(min(0.02, max(0.0, end - time.monotonic())))
        if step.get("close"):
            self.close_connection = True
            return
        if "json" in step:
            payload, ctype = json.dumps(step["json"]).encode(), "application/json"
        else:
            payload, ctype = str(step.get("body", "")).encode(), step.get("content_type", "text/plain")
        self.send(step.get("status", 200), payload, step.get("content_type", ctype), step.get("headers"), step.get("truncate"))
        record["server_ms"] = (time.perf_counter() - started) * 1000

    def control(self, path, body):
        global script
        if path == "/_mock/script":
            steps = json.loads(body.decode() or "[]")
            with lock:
                script = list(steps) if isinstance(steps, list) else []
            return self.send_json(200, {"steps": len(script)})
        if path == "/_mock/requests":
            with lock:
                data = list(records)
            return self.send_json(200, data)
        if path == "/_mock/reset":
            with lock:
                script = []
                records.clear()
            return self.send_json(200, {"ok": True})
        if path == "/_mock/shutdown":
            self.send_json(200, {"ok": True})
            stopping.set()
            threading.Thread(target=self.server.shutdown, daemon=True).start()
            return
        return self.send_json(404, {"error": {"message": "mock provider: no control endpoint " + path}})

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any


def watch_parent(pid, server):
    started = time.monotonic()
    while not stopping.is_set():
        gone = False
        try:
            os.kill(pid, 0)
        except OSError:
            gone = True
        if gone or time.monotonic() - started > LIFETIME_S:
            stopping.set()
            server.shutdown()
            return
        time.sleep(0.2)


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--port-file", required=True)
    args.add_argument("--parent", type=int, required=True)
    opts = args.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    tmp = opts.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, opts.port_file)
    threading.Thread(target=watch_parent, args=(opts.parent, server), daemon=True).start()
    server.serve_forever(poll_interval=0.1)
    server.server_close()


if __name__ == "__main__":
    sys.exit(main())
