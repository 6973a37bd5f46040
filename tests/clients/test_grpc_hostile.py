"""The gRPC port in a hostile world, on loopback, each case bounded in time:
a flood of calls on one connection (and of streams past its limit), a
shutdown under load, a client that opens streams and never
takes its replies, a malformed frame, and a call whose deadline passes
while it is queued. In each the server neither crashes nor hangs, and
another client is served meanwhile.

The raw cases speak HTTP/2 by hand (RFC 9113 frames; header blocks as
HPACK literals without Huffman coding), as a broken or hostile client
would, rather than through a client library that would not misbehave.
"""
import re
import socket
import struct
import threading
import time
import urllib.request

import grpc
import pytest

DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x7, 0x8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
CANCEL = 0x8
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def literal(name, value):
    """An HPACK literal header field without indexing, new name (RFC 7541 6.2.2); short strings only."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def call_frames(stream, path, message):
    block = b"".join(literal(n, v) for n, v in [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
                                               (b":authority", b"t"), (b"content-type", b"application/grpc"),
                                               (b"te", b"trailers")])
    body = b"\x00" + struct.pack(">I", len(message)) + message
    return frame(HEADERS, END_HEADERS, stream, block) + frame(DATA, END_STREAM, stream, body)


class RawClient:
    """One HTTP/2 connection spoken by hand."""

    def __init__(self, port, window=1 << 20):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        settings = struct.pack(">HI", 0x4, window)  # SETTINGS_INITIAL_WINDOW_SIZE
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))
        if window:
            self.sock.sendall(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1 << 30)))
        self.buffer = b""
        # The server's settings apply once acknowledged (its stream limit among them).
        while True:
            kind, flags, _, _ = self.read()
            if kind == SETTINGS and not flags & ACK:
                self.sock.sendall(frame(SETTINGS, ACK, 0))
                return

    def read(self, until=None):
        """The next frame (type, flags, stream, payload); None at end of stream or `until`."""
        while len(self.buffer) < 9 or len(self.buffer) < 9 + int.from_bytes(self.buffer[:3], "big"):
            if until is not None:
                left = until - time.monotonic()
                if left <= 0:
                    return None
                self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return None
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self.buffer += chunk
        length = int.from_bytes(self.buffer[:3], "big")
        kind, flags = self.buffer[3], self.buffer[4]
        stream = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
        payload, self.buffer = self.buffer[9:9 + length], self.buffer[9 + length:]
        return kind, flags, stream, payload

    def close(self):
        self.sock.close()

    def told_why_and_closed(self, seconds=10):
        """Whether the server sent GOAWAY and closed the connection within `seconds`; then closed here too."""
        until = time.monotonic() + seconds
        kinds = []
        while (got := self.read(until)) is not None:
            kinds.append(got[0])
        self.close()
        return GOAWAY in kinds and time.monotonic() < until


@pytest.fixture
def served(demo, serve):
    return serve([demo / "ranker_a"], feature_store=demo / "store.jsonl",
                 args=["--grpc-port", "0", "--body-timeout", "1", "--header-timeout", "1"])


def predict_message(pb):
    return pb.PredictRequest(user=pb.Entity(id="u3"), items=[pb.Entity(id="i1"), pb.Entity(id="i7")])


def another_client_is_served(server, pb, pb_grpc, busy=False):
    """Scored; or, `busy` (a flood fills the queue), at least answered at once."""
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        try:
            assert len(pb_grpc.RankingStub(channel).Predict(predict_message(pb), timeout=10).scores) == 2
        except grpc.RpcError as e:
            if not busy or e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise


def metric(server, name, labels=""):
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = re.findall(rf"^{re.escape(name)}{re.escape(labels)}\S* (\S+)$", text, re.M)
    return sum(float(v) for v in found)


def test_a_flood_of_streams_on_one_connection(served, stubs):
    pb, pb_grpc, _, _ = stubs
    # A client that respects the stream limit: 1,000 calls at once on one
    # channel, each answered (scored, or refused for a full queue:
    # RESOURCE_EXHAUSTED) in bounded time.
    with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
        ranking = pb_grpc.RankingStub(channel)
        calls = [ranking.Predict.future(predict_message(pb), timeout=60) for _ in range(1000)]
        another_client_is_served(served, pb, pb_grpc, busy=True)
        codes = {}
        for call in calls:
            code = call.code()
            codes[code] = codes.get(code, 0) + 1
        assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}, codes
        assert codes.get(grpc.StatusCode.OK, 0) > 0
    # One that ignores it: 1,000 streams sent at once break the protocol, and
    # only that connection ends — GOAWAY, then closed.
    client = RawClient(served.grpc_port)
    message = predict_message(pb).SerializeToString()
    client.sock.sendall(b"".join(call_frames(s, b"/numaserve.v1.Ranking/Predict", message) for s in range(1, 2000, 2)))
    assert client.told_why_and_closed()
    another_client_is_served(served, pb, pb_grpc)
    stops_cleanly(served)


def test_a_client_that_never_takes_its_replies(served, stubs):
    pb, pb_grpc, _, _ = stubs
    client = RawClient(served.grpc_port, window=0)  # no flow-control window: no reply's data can be sent
    message = predict_message(pb).SerializeToString()
    streams = [1, 3, 5, 7, 9]
    client.sock.sendall(b"".join(call_frames(s, b"/numaserve.v1.Ranking/Predict", message) for s in streams))
    another_client_is_served(served, pb, pb_grpc)
    reset = set()
    until = time.monotonic() + 10  # --body-timeout 1: each stream is reset a second after its reply
    while len(reset) < len(streams):
        got = client.read(until)
        assert got is not None, f"{len(reset)} of {len(streams)} streams reset within 10 s"
        kind, _, stream, payload = got
        if kind == RST_STREAM:
            assert struct.unpack(">I", payload)[0] == CANCEL
            reset.add(stream)
    client.close()
    another_client_is_served(served, pb, pb_grpc)


@pytest.mark.parametrize("bad", [
    frame(DATA, END_STREAM, 0, b"x"),   # DATA on the connection's stream: a connection error
    frame(HEADERS, END_HEADERS, 2, b"\x82"),  # an even stream id from a client
    frame(SETTINGS, 0, 0, b"\x00\x04\xff\xff\xff\xff"),  # a window larger than HTTP/2 allows
])
def test_a_malformed_frame_ends_only_its_connection(served, stubs, bad):
    pb, pb_grpc, _, _ = stubs
    client = RawClient(served.grpc_port)
    client.sock.sendall(bad)
    assert client.told_why_and_closed()
    # Not HTTP/2 at all: closed as well.
    with socket.create_connection(("127.0.0.1", served.grpc_port), timeout=10) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        raw.settimeout(10)
        while raw.recv(4096):
            pass
    another_client_is_served(served, pb, pb_grpc)
    stops_cleanly(served)


def test_the_admin_ports_http2_is_bounded_as_the_grpc_ports(demo, serve, stubs):
    """The admin port serves HTTP/2 to connections that open with its
    preface: a malformed frame there ends only that connection, HTTP/1.1
    clients and gRPC probes go on being served, and an idle HTTP/2
    connection does not hold up the drain."""
    _, _, health, health_grpc = stubs
    server = serve([demo / "ranker_a"], feature_store=demo / "store.jsonl",
                   args=["--admin-port", "0", "--grpc-port", "0", "--body-timeout", "1", "--header-timeout", "1"])
    idle = RawClient(server.admin_port)  # its handshake answered: HTTP/2 on the admin port
    client = RawClient(server.admin_port)
    client.sock.sendall(frame(DATA, END_STREAM, 0, b"x"))
    assert client.told_why_and_closed()
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/metrics", timeout=10) as reply:
        assert reply.status == 200
    with grpc.insecure_channel(f"127.0.0.1:{server.admin_port}") as channel:
        assert health_grpc.HealthStub(channel).Check(health.HealthCheckRequest(), timeout=10).status == \
            health.HealthCheckResponse.SERVING
    stops_cleanly(server)
    idle.close()


def stops_cleanly(server):
    """SIGTERM ends it, drained, well within its grace: no connection kept it."""
    start = time.monotonic()
    assert server.stop() == 0
    assert time.monotonic() - start < 10


def test_a_shutdown_under_load_answers_or_refuses_every_call(served, stubs):
    pb, pb_grpc, _, _ = stubs
    codes, stop = {}, threading.Event()

    def caller():
        with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
            ranking = pb_grpc.RankingStub(channel)
            while not stop.is_set():
                try:
                    ranking.Predict(predict_message(pb), timeout=10, wait_for_ready=False)
                    code = grpc.StatusCode.OK
                except grpc.RpcError as e:
                    code = e.code()
                codes[code] = codes.get(code, 0) + 1
                if code == grpc.StatusCode.UNAVAILABLE:
                    return  # the server has gone away: a client would go elsewhere now

    callers = [threading.Thread(target=caller) for _ in range(4)]
    for t in callers:
        t.start()
    time.sleep(1)
    stops_cleanly(served)
    stop.set()
    for t in callers:
        t.join(15)
        assert not t.is_alive()
    # Every call scored, or refused as the server left (the client retries elsewhere); none failed otherwise.
    assert codes.get(grpc.StatusCode.OK, 0) > 0
    assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE}, codes


def test_a_call_past_its_deadline_in_the_queue_is_refused_and_never_run(demo, serve, stubs):
    pb, pb_grpc, _, _ = stubs
    # A batch starts 300 ms after its first request: a call with 100 ms left waits past its deadline.
    server = serve([demo / "ranker_a"], feature_store=demo / "store.jsonl",
                   args=["--grpc-port", "0", "--max-batch-delay-us", "300000"])
    forwarded = metric(server, "numaserve_worker_forward_requests_total")
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        ranking = pb_grpc.RankingStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            ranking.Predict(predict_message(pb), timeout=0.1)
        assert refused.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        time.sleep(0.5)  # the batch's time has come and gone
        labels = '{method="/numaserve.v1.Ranking/Predict",code="DEADLINE_EXCEEDED"}'
        assert metric(server, "numaserve_grpc_requests_total", labels) == 1
        assert metric(server, "numaserve_worker_forward_requests_total") == forwarded  # never run
        assert len(ranking.Predict(predict_message(pb), timeout=10).scores) == 2
