# An HTTP/1.1 server on 127.0.0.1 for bench/waiting: it answers every
# request with {"ok":true} after DELAY_S seconds, many at once (asyncio).
#   python3 bench/waiting/slow_server.py PORTFILE [DELAY_S]
# It writes its port to PORTFILE once it listens, and exits by itself after
# 120 s, so that a bench that failed half-way cannot leave it behind.
import asyncio
import os
import sys

DELAY_S = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
BODY = b'{"ok":true}'


async def handle(reader, writer):
    try:
        while True:
            line = await reader.readline()
            if not line or line in (b"\r\n", b"\n"):
                break
        await asyncio.sleep(DELAY_S)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n%s" % (len(BODY), BODY))
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


# The kernel caps a listening socket's queue (net.core.somaxconn, 4096 here):
# 10,000 connections at once would overflow one and wait for the SYNs to be
# sent again (1 s, then 3 s...). LISTENERS sockets share the port instead.
LISTENERS = 8


async def main():
    servers = [await asyncio.start_server(handle, "127.0.0.1", 0, backlog=16384, reuse_port=True)]
    port = servers[0].sockets[0].getsockname()[1]
    for _ in range(LISTENERS - 1):
        servers.append(await asyncio.start_server(handle, "127.0.0.1", port, backlog=16384, reuse_port=True))
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(port))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    await asyncio.sleep(120)


asyncio.run(main())
