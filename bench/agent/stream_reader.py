"""The baseline of bench/agent/stream.lua's latency: a plain reader, blocked
in recv on a socket, of the same stamped stream from the mock provider.

    python3 stream_reader.py URL     (URL: the mock's, e.g. http://127.0.0.1:PORT)

Asks for a Chat Completions stream, and for each delta whose text is a
CLOCK_MONOTONIC stamp (ns, the mock's `stamp` option) prints the time in ns
from the stamp to the recv that completed the delta's event, one per line.
What it measures is the loopback and the wake-up of a blocked reader: what
the runtime's figure holds that is not the runtime's.
"""
import json
import re
import socket
import sys
import time
from urllib.parse import urlparse


def main():
    url = urlparse(sys.argv[1])
    body = json.dumps({"model": "gpt-bench", "messages": [{"role": "user", "content": "Stream."}],
                       "stream": True, "stream_options": {"include_usage": True}}).encode()
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer sk-bench\r\n"
            "Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (url.netloc, len(body))).encode()
    s = socket.create_connection((url.hostname, url.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(head + body)
    stamp = re.compile(rb'"content": ?"(\d{6,})"')
    pending = b""
    while True:
        data = s.recv(65536)
        now = time.monotonic_ns()
        if not data:
            break
        pending += data
        cut = pending.rfind(b"\n\n")
        if cut < 0:
            continue
        for m in stamp.finditer(pending, 0, cut):
            print(now - int(m.group(1)))
        pending = pending[cut + 2:]
    s.close()


if __name__ == "__main__":
    main()
