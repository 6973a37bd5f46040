#!/usr/bin/env python3
"""bench/soak.sh's slow clients: N connections held open to 127.0.0.1:PORT
until the file STOP exists, half of them trickling a request header one
line every 2 s (slowloris), half a header whole and then a body of 64 KiB
one byte every 2 s. The server closes each on its header or body timeout;
it is opened again at once, so N stay open throughout. Prints
{"opened", "closed_by_server"} at the end. One process, one thread: its
CPU is the load generator's, not the server's."""
import json
import os
import selectors
import socket
import sys
import time

port, count, stop = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
TRICKLE_SECONDS = 2
selector = selectors.DefaultSelector()
opened = closed_by_server = 0


def open_one(index):
    global opened
    s = socket.create_connection(("127.0.0.1", port))
    s.setblocking(False)
    if index % 2:
        s.sendall(b"POST /predict HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n\r\n{")
    else:
        s.sendall(b"POST /predict HTTP/1.1\r\nHost: soak\r\n")
    selector.register(s, selectors.EVENT_READ, index)
    opened += 1
    return s


clients = {i: open_one(i) for i in range(count)}
next_trickle = time.monotonic() + TRICKLE_SECONDS
while not os.path.exists(stop):
    for key, _ in selector.select(timeout=0.5):
        # The server answered (408) or closed: read what it sent, open anew.
        s, index = key.fileobj, key.data
        try:
            data = s.recv(65536)
        except OSError:
            data = b""
        if data and not data.startswith(b"HTTP/1.1 408") and b"\r\n\r\n" not in data:
            continue
        selector.unregister(s)
        s.close()
        closed_by_server += 1
        clients[index] = open_one(index)
    if time.monotonic() >= next_trickle:
        next_trickle += TRICKLE_SECONDS
        for index, s in clients.items():
            try:
                s.send(b"0" if index % 2 else b"X-Slow: 1\r\n")
            except OSError:
                pass  # closed by the server: select sees it
for s in clients.values():
    s.close()
print(json.dumps({"opened": opened, "closed_by_server": closed_by_server}))
