"""numaserve on loopback: the served scores of an exported model, before it ships.

The package proves the features equal; this proves the whole path. A
training pipeline's last step can serve the directory it exported, as the
service will, and compare what /predict answers with what the module gives
in Python:

    with numaserve.LocalServer("models/ctr", feature_store="store.jsonl") as server:
        reply = server.predict({"user": {"id": "u1"}, "items": [{"id": "i1"}]})
        reply["scores"]

It runs `numaserve serve` (the binary: `binary=`, else $NUMASERVE_BINARY,
else `numaserve` on PATH) on 127.0.0.1 with a port the kernel picks, waits
until it is ready, and stops it with SIGTERM on exit.
"""
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

from .errors import NumaserveError


class ServedError(NumaserveError):
    """A reply that is not 200: `status`, `body` (the JSON the service
    answered), and its `field` and `message` as the other refusals carry them."""

    def __init__(self, status, body):
        body = body if isinstance(body, dict) else {"error": str(body)}
        super().__init__(body.get("field", ""), f"HTTP {status}: {body.get('error', body)}")
        self.status, self.body = status, body


def find_binary(binary=None):
    """The numaserve binary: `binary`, else $NUMASERVE_BINARY, else on PATH."""
    found = binary or os.environ.get("NUMASERVE_BINARY") or shutil.which("numaserve")
    if not found:
        raise FileNotFoundError("numaserve: not found (pass binary=, set NUMASERVE_BINARY or put it on PATH)")
    return str(found)


class LocalServer:
    """`numaserve serve` on loopback for the model directories given.
    `args` are more serve options (e.g. ["--workers", "1"]); `log` collects
    the server's log lines."""

    def __init__(self, model_dirs, feature_store=None, binary=None, args=(), start_timeout=120.0):
        dirs = [model_dirs] if isinstance(model_dirs, (str, os.PathLike)) else list(model_dirs)
        self.command = [find_binary(binary), "serve", "--listen-address", "127.0.0.1", "--port", "0", "--log-format", "json"]
        for d in dirs:
            self.command += ["--model-dir", str(d)]
        if feature_store is not None:
            self.command += ["--feature-store", str(feature_store)]
        self.command += [str(a) for a in args]
        self.start_timeout = start_timeout
        self.log, self.port, self.admin_port, self.grpc_port, self._process = [], None, None, None, None
        self._listening = threading.Event()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _read_log(self):
        # Drained from the start, or a chatty server would block on a full pipe.
        for line in self._process.stderr:
            self.log.append(line.rstrip("\n"))
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and str(entry.get("msg", "")).startswith("listening"):
                self.port = int(entry["port"])
                if entry.get("admin_port", "none") != "none":  # started with --admin-port
                    self.admin_port = int(entry["admin_port"])
                if entry.get("grpc_port", "none") != "none":  # started with --grpc-port
                    self.grpc_port = int(entry["grpc_port"])
                self._listening.set()
        self._listening.set()  # exited: start() reports it

    def start(self):
        self._process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True, errors="replace")
        threading.Thread(target=self._read_log, daemon=True).start()
        deadline = time.monotonic() + self.start_timeout
        self._listening.wait(self.start_timeout)
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            if self.port is not None:
                try:
                    if self.request("GET", "/readyz")[0] == 200:
                        return self
                except OSError:
                    pass
            time.sleep(0.05)
        tail = "\n".join(self.log[-20:])
        self.stop()
        raise RuntimeError(f"{' '.join(self.command)}: not ready within {self.start_timeout:.0f} s\n{tail}")

    def stop(self):
        """SIGTERM, then the exit status (killed after 30 s: negative); None if never started."""
        if self._process is None:
            return None
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        return self._process.returncode

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def request(self, method, path, body=None, timeout=30.0):
        """(status, parsed JSON body or None) of one request."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as reply:
                status, text = reply.status, reply.read()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read()
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text.decode(errors="replace")

    def predict(self, body):
        """POST /predict; the reply's JSON, or ServedError for any other status than 200."""
        status, reply = self.request("POST", "/predict", body)
        if status != 200:
            raise ServedError(status, reply)
        return reply
