#!/usr/bin/env python3
"""Sends N POST requests at once and prints, as JSON, each one's status, body
and time, and the total time in ms. For the specs that check a server is not
blocked by one slow request (nginx with luma).

    http_burst.py URL N BODY [--out FILE]
"""
import json
import sys
import threading
import time
import urllib.error
import urllib.request


def one(url, body, results, i):
    start = time.monotonic()
    try:
        req = urllib.request.Request(url, data=body.encode(), method="POST",
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    except Exception as e:  # a refused or reset connection is a result too
        status, text = 0, str(e)
    results[i] = {"status": status, "body": text, "ms": (time.monotonic() - start) * 1000}


def main():
    url, n, body = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    out = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--out" else None
    results = [None] * n
    start = time.monotonic()
    threads = [threading.Thread(target=one, args=(url, body, results, i)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    text = json.dumps({"total_ms": (time.monotonic() - start) * 1000, "results": results})
    if out:
        with open(out + ".part", "w") as f:
            f.write(text)
        import os
        os.rename(out + ".part", out)
    else:
        print(text)


if __name__ == "__main__":
    main()
