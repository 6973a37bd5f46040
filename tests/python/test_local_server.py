"""numaserve.LocalServer: the exported directory served on loopback, its
refusals raised with the service's field, and the process gone afterwards."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import numaserve  # noqa: E402


def test_serves_refuses_with_the_field_and_stops(tmp_path):
    binary = os.environ["NUMASERVE_BINARY"]
    subprocess.run([binary, "make-demo-models", str(tmp_path), "--embedding-mb", "1", "--users", "5", "--items", "5"],
                   check=True, capture_output=True, timeout=120)
    server = numaserve.LocalServer(tmp_path / "ranker_b", feature_store=tmp_path / "store.jsonl", binary=binary,
                                   args=["--workers", "1"])
    with server:
        reply = server.predict({"user": {"id": "u1"}, "items": [{"id": "i1"}, {"id": "i2"}]})
        assert reply["model"] == "ranker_b" and len(reply["scores"]) == 2
        with pytest.raises(numaserve.ServedError) as refused:
            server.predict({"user": {"id": "u1"}, "items": [{"id": "i1", "colour": 1}]})
        assert refused.value.status == 400 and refused.value.field == "items[0].colour"
        process = server._process
    assert process.poll() is not None, "the server outlived the with block"


def test_a_server_that_cannot_start_says_why(tmp_path):
    server = numaserve.LocalServer(tmp_path / "nothing", binary=os.environ["NUMASERVE_BINARY"], start_timeout=30)
    with pytest.raises(RuntimeError) as failed:
        server.start()
    assert "nothing" in str(failed.value) and "model.yaml" in str(failed.value)
