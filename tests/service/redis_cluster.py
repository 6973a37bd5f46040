#!/usr/bin/env python3
"""A real Redis Cluster for the tests: Debian's redis-server, cluster-enabled,
N masters and a replica each on loopback ports, made with
`redis-cli --cluster create`, with fast failure detection
(cluster-node-timeout 1 s) so a killed master's replica is promoted within
seconds, and configured as docs/operate.md asks of a feature store's
cluster (cluster-require-full-coverage no).

    redis_cluster.py start DIR [--masters 3] [--replicas 1] [--password PW]   prints {"ports": [...], "masters": [...]}
    redis_cluster.py stop DIR                                 kills every node started in DIR

Imported by tests/clients/conftest.py; run by tests/service/redis_test.cpp.
Every node's pid is in DIR/pids: a test that dies leaves nothing a later
`stop` cannot end.
"""
import argparse
import json
import os
import pathlib
import random
import shutil
import signal
import socket
import subprocess
import sys
import time

NODE_TIMEOUT_MS = 1000


def _free(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count):
    """Ports whose cluster bus port (+10000) is free too."""
    ports = []
    while len(ports) < count:
        port = random.randint(20000, 45000)
        if port not in ports and _free(port) and _free(port + 10000):
            ports.append(port)
    return ports


PASSWORD = {}  # port -> requirepass, for cli()


def cli(port, *args, timeout=10):
    auth = ["--no-auth-warning", "-a", PASSWORD[port]] if port in PASSWORD else []
    return subprocess.run(["redis-cli", "-p", str(port), *auth, *args], capture_output=True, text=True,
                          timeout=timeout).stdout


def wait_ok(ports, deadline):
    """Every node says cluster_state:ok and knows every slot."""
    while time.monotonic() < deadline:
        infos = [cli(p, "CLUSTER", "INFO") for p in ports]
        if all("cluster_state:ok" in i and "cluster_slots_ok:16384" in i for i in infos):
            return True
        time.sleep(0.1)
    return False


def start(directory, masters=3, replicas=1, password=None):
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    server = shutil.which("redis-server") or "/usr/bin/redis-server"
    ports = free_ports(masters * (1 + replicas))
    pids = []
    for port in ports:
        node = directory / str(port)
        node.mkdir(exist_ok=True)
        process = subprocess.Popen(
            [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", str(node / "nodes.conf"), "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
             # As a feature store should run: a master down costs its own slots,
             # not every node's answers (CLUSTERDOWN) until its replica is promoted.
             "--cluster-require-full-coverage", "no", "--cluster-allow-reads-when-down", "yes",
             "--save", "", "--appendonly", "no", "--dir", str(node), "--logfile", str(node / "redis.log"),
             *(["--requirepass", password, "--masterauth", password] if password else [])],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        pids.append(process.pid)
        if password:
            PASSWORD[port] = password
    (directory / "pids").write_text("\n".join(map(str, pids)) + "\n")
    deadline = time.monotonic() + 30
    for port in ports:
        while "PONG" not in cli(port, "PING"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on {port} did not start")
            time.sleep(0.05)
    created = subprocess.run(
        ["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports], "--cluster-replicas", str(replicas),
         "--cluster-yes", *(["--no-auth-warning", "-a", password] if password else [])],
        capture_output=True, text=True, timeout=60)
    if created.returncode != 0 or not wait_ok(ports, time.monotonic() + 30):
        raise RuntimeError("redis-cli --cluster create: " + created.stdout + created.stderr)
    # Replicas must have synced before a failover can promote them.
    while time.monotonic() < deadline + 30:
        roles = [cli(p, "ROLE").split("\n")[0] for p in ports]
        synced = [p for p, r in zip(ports, roles) if r == "slave" and "master_link_status:up" in cli(p, "INFO", "replication")]
        if len(synced) == masters * replicas:
            break
        time.sleep(0.1)
    return {"ports": ports, "masters": master_ports(ports)}


def master_ports(ports):
    return [p for p in ports if cli(p, "ROLE").split("\n")[0] == "master"]


def stop(directory):
    pids = pathlib.Path(directory) / "pids"
    if not pids.exists():
        return
    for pid in pids.read_text().split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    pids.unlink()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("dir")
    parser.add_argument("--masters", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--password", help="requirepass and masterauth of every node")
    args = parser.parse_args()
    if args.action == "stop":
        stop(args.dir)
        return 0
    try:
        print(json.dumps(start(args.dir, args.masters, args.replicas, args.password)))
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        stop(args.dir)
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
