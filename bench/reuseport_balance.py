#!/usr/bin/env python3
"""How evenly SO_REUSEPORT spreads connections over listeners on one port.

The measurement behind the service's choice of one acceptor handing
connections to its loops round-robin (service/http/server.h): LOOPS
listeners share a loopback port with SO_REUSEPORT, CONNS clients connect,
and each listener counts what the kernel's hash gave it; 200 trials each.
Round-robin needs no measurement: by construction no loop is more than one
connection from its even share.

Usage: bench/reuseport_balance.py [--trials N]
"""
import argparse
import socket
import statistics


def trial(loops, conns):
    listeners, port = [], 0
    for _ in range(loops):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", port))
        port = s.getsockname()[1]
        s.listen(4096)
        s.setblocking(False)
        listeners.append(s)
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]
    counts = []
    for s in listeners:
        n = 0
        while True:
            try:
                c, _ = s.accept()
            except BlockingIOError:
                break
            c.close()
            n += 1
        counts.append(n)
    for c in clients + listeners:
        c.close()
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=200)
    trials = parser.parse_args().trials
    print("loops conns  busiest loop / even share (median, p90)  trials with an idle loop")
    for loops in (2, 4):
        for conns in (4, 16, 256):
            busiest, idle = [], 0
            for _ in range(trials):
                counts = trial(loops, conns)
                busiest.append(max(counts) / (conns / loops))
                idle += min(counts) == 0
            busiest.sort()
            p90 = busiest[int(0.9 * (len(busiest) - 1))]
            print(f"{loops:5} {conns:5}  {statistics.median(busiest):6.2f} {p90:6.2f}"
                  f"                           {100 * idle / trials:5.1f}%")


if __name__ == "__main__":
    main()
