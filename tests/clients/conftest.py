"""Shared by the real-client tests: the built service, a small demo model
directory and store, a redis-server on loopback, a Redis Cluster on loopback
(tests/service/redis_cluster.py), and numaserve serving.

Runs on tests/clients/.venv's Python (Feast, Triton's and KServe's clients
need numpy 2, Debian's torch numpy 1), so nothing here imports torch: the
tensors come from the service itself (`numaserve extract`), and the server
from numaserve.local, the package's torch-free launcher.
"""
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from numaserve.local import LocalServer  # noqa: E402

sys.path.append(str(ROOT / "tests" / "service"))
import redis_cluster as cluster_nodes  # noqa: E402


@pytest.fixture(scope="session")
def binary():
    path = os.environ.get("NUMASERVE_BINARY")
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"NUMASERVE_BINARY={path!r}: point it at the built service; these tests do not skip")
    return path


@pytest.fixture(scope="session")
def demo(binary, tmp_path_factory):
    """make-demo-models, small: ranker_a, ranker_b, store.jsonl."""
    out = tmp_path_factory.mktemp("demo")
    subprocess.run([binary, "make-demo-models", str(out), "--embedding-mb", "4", "--users", "60", "--items", "200"],
                   check=True, capture_output=True, timeout=120)
    return out


def store_lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_port(tmp_path):
    """A real redis-server on 127.0.0.1 (Feast's connection string is
    host:port), without persistence, stopped after the test."""
    server = shutil.which("redis-server") or "/usr/bin/redis-server"
    for _ in range(5):  # the port is free when picked, another process may take it first
        port = free_port()
        process = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                    "--appendonly", "no", "--dir", str(tmp_path)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        yield port
                        process.terminate()
                        process.wait(10)
                        return
            except OSError:
                time.sleep(0.05)
        process.kill()
        process.wait()
    pytest.fail("redis-server did not start on a loopback port")


@pytest.fixture
def redis_cluster(tmp_path):
    """A real Redis Cluster on 127.0.0.1: 3 masters and a replica each, every
    slot covered; yields its nodes' ports. Every node is killed afterwards,
    also when start-up or the test fails."""
    directory = tmp_path / "redis-cluster"
    try:
        yield cluster_nodes.start(directory, masters=3, replicas=1)["ports"]
    finally:
        cluster_nodes.stop(directory)


@pytest.fixture
def serve(binary):
    """serve(model_dirs, feature_store=None, args=()) -> a started LocalServer, stopped after the test."""
    started = []

    def start(model_dirs, feature_store=None, args=()):
        server = LocalServer(model_dirs, feature_store=feature_store, binary=binary,
                             args=["--workers", "1", *args], start_timeout=60).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def v2_inputs(metadata, tensors):
    """The tensors `extract` printed as name -> numpy array, in the metadata's input order."""
    out = {}
    bags = iter(tensors["bags"])
    for spec in metadata["inputs"]:
        if spec["name"] == "dense":
            out["dense"] = np.array(tensors["dense"], dtype=np.float32).reshape(tensors["rows"], tensors["dense_width"])
        elif spec["name"].endswith("_indices"):
            bag = next(bags)
            out[spec["name"]] = np.array(bag["indices"], dtype=np.int64)
            out[spec["name"][:-len("_indices")] + "_offsets"] = np.array(bag["offsets"], dtype=np.int64)
    return out


def kserve_inputs(metadata, tensors, binary_data):
    """The tensors as KServe's InferInput list, as raw bytes (binary_data) or typed values."""
    from kserve import InferInput
    inputs = []
    for name, array in v2_inputs(metadata, tensors).items():
        one = InferInput(name, list(array.shape), "FP32" if array.dtype == np.float32 else "INT64")
        one.set_data_from_numpy(array, binary_data=binary_data)
        inputs.append(one)
    return inputs


@pytest.fixture(scope="session")
def stubs(tmp_path_factory):
    """The repository's ranking.proto and health.proto, compiled for Python."""
    out = tmp_path_factory.mktemp("stubs")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'service/codec/proto'}",
                    f"--python_out={out}", f"--grpc_python_out={out}", "ranking.proto", "health.proto"],
                   check=True, timeout=60)
    sys.path.insert(0, str(out))
    import health_pb2, health_pb2_grpc, ranking_pb2, ranking_pb2_grpc  # noqa: E401
    return ranking_pb2, ranking_pb2_grpc, health_pb2, health_pb2_grpc


def extract(binary, model_dir, store, bodies):
    """The tensors the service builds for each body (`numaserve extract`)."""
    lines = "".join(json.dumps(b) + "\n" for b in bodies)
    result = subprocess.run([binary, "extract", "--model-dir", str(model_dir), "--feature-store", str(store)],
                            input=lines, capture_output=True, text=True, timeout=60, check=True)
    return [json.loads(line) for line in result.stdout.splitlines()]
