"""The gRPC port driven by real clients: Python's grpcio with the
repository's own .proto files (numaserve.v1.Ranking, grpc.health.v1) and
Triton's gRPC client (tritonclient.grpc, KServe v2's GRPCInferenceService).

Ranking.Predict must score as /predict does for the same requests (unknown
ids and inline features included); ModelInfer on the tensors the service
itself extracts must score as /predict does; every refusal comes back with
the status code the protocol gives it and a message naming the field.
KServe's own gRPC client runs in test_grpc_kserve.py: its generated code
and Triton's define the same protobuf names and cannot share a process.
"""
import shutil
import urllib.request

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException

from conftest import extract, v2_inputs

BODIES = [
    {"user": {"id": "u3"}, "context": {"hour": 9, "device": "app"}, "items": [{"id": "i1"}, {"id": "i7"}, {"id": "i12"}]},
    {"user": {"id": "u9", "features": {"age": 31}}, "items": [{"id": "i4", "features": {"category": "c2"}}]},
    {"user": {"id": "nobody"}, "items": [{"id": f"i{k}"} for k in range(30)] + [{"id": "never-stored"}]},
]


def feature_value(pb, value):
    if isinstance(value, list):
        return pb.FeatureValue(ids=pb.IdList(ids=[str(v) for v in value]))
    if isinstance(value, str):
        return pb.FeatureValue(id=value)
    return pb.FeatureValue(number=value)


def entity(pb, body):
    return pb.Entity(id=body["id"], features={k: feature_value(pb, v) for k, v in body.get("features", {}).items()})


def ranking_request(pb, body, **fields):
    return pb.PredictRequest(user=entity(pb, body["user"]), items=[entity(pb, i) for i in body["items"]],
                             context={k: feature_value(pb, v) for k, v in body.get("context", {}).items()}, **fields)


@pytest.fixture
def served(demo, serve):
    server = serve([demo / "ranker_a", demo / "ranker_b"], feature_store=demo / "store.jsonl",
                   args=["--grpc-port", "0", "--max-body-bytes", "64Ki"])
    assert server.grpc_port
    return server


def metrics(server):
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as reply:
        return reply.read().decode()


def test_ranking_scores_as_predict_does(served, stubs):
    pb, pb_grpc, health, health_grpc = stubs
    with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
        assert health_grpc.HealthStub(channel).Check(health.HealthCheckRequest(), timeout=10).status == \
            health.HealthCheckResponse.SERVING
        ranking = pb_grpc.RankingStub(channel)
        for body in BODIES:
            for model in ("ranker_a", "ranker_b"):
                want = served.predict(dict(body, model=model, request_id="q1"))
                got = ranking.Predict(ranking_request(pb, body, model=model, request_id="q1"), timeout=10)
                assert (got.model, got.model_version, got.request_id) == (want["model"], want["model_version"], "q1")
                assert list(got.scores) == pytest.approx(want["scores"], rel=1e-6, abs=1e-7)
        # The default model, and an id made when none is given.
        got = ranking.Predict(ranking_request(pb, BODIES[0]), timeout=10)
        assert got.model == "ranker_a" and got.request_id.startswith("ns-")


def test_ranking_refusals_carry_the_protocols_codes(served, stubs):
    pb, pb_grpc, health, health_grpc = stubs
    with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
        ranking = pb_grpc.RankingStub(channel)
        cases = [
            (pb.PredictRequest(items=[pb.Entity(id="i1")]), grpc.StatusCode.INVALID_ARGUMENT, "user"),
            (pb.PredictRequest(user=pb.Entity(id="u1")), grpc.StatusCode.INVALID_ARGUMENT, "items"),
            (pb.PredictRequest(user=pb.Entity(id="u1"), items=[pb.Entity()]), grpc.StatusCode.INVALID_ARGUMENT,
             "items[0].id"),
            (pb.PredictRequest(user=pb.Entity(id="u1", features={"age": pb.FeatureValue()}), items=[pb.Entity(id="i")]),
             grpc.StatusCode.INVALID_ARGUMENT, "user.features.age"),
            (ranking_request(pb, BODIES[0], model="no_such_model"), grpc.StatusCode.NOT_FOUND, "no_such_model"),
            (ranking_request(pb, BODIES[0], version="99"), grpc.StatusCode.NOT_FOUND, "99"),
            # Larger than --max-body-bytes: refused before it is parsed.
            (pb.PredictRequest(user=pb.Entity(id="u" * 70000), items=[pb.Entity(id="i")]),
             grpc.StatusCode.RESOURCE_EXHAUSTED, "limit"),
        ]
        for request, code, named in cases:
            with pytest.raises(grpc.RpcError) as refused:
                ranking.Predict(request, timeout=10)
            assert refused.value.code() == code, refused.value.details()
            assert named in refused.value.details()
        # A method the server does not have, and a health check of a service it does not offer.
        unknown = channel.unary_unary("/numaserve.v1.Ranking/Explain", request_serializer=lambda m: m,
                                      response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as refused:
            unknown(b"", timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.RpcError) as refused:
            health_grpc.HealthStub(channel).Check(health.HealthCheckRequest(service="nope"), timeout=10)
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        # Still serving after every refusal.
        assert ranking.Predict(ranking_request(pb, BODIES[0]), timeout=10).scores
    text = metrics(served)
    assert 'numaserve_grpc_requests_total{method="/numaserve.v1.Ranking/Predict",code="OK"}' in text
    assert 'numaserve_grpc_requests_total{method="/numaserve.v1.Ranking/Predict",code="INVALID_ARGUMENT"} 4' in text


def test_tritons_grpc_client(demo, binary, served):
    client = triton.InferenceServerClient(url=f"127.0.0.1:{served.grpc_port}")
    assert client.is_server_live() and client.is_server_ready()
    assert client.get_server_metadata(as_json=True)["name"] == "numaserve"
    assert client.is_model_ready("ranker_a") and client.is_model_ready("ranker_b", "1")
    metadata = client.get_model_metadata("ranker_a", as_json=True)
    assert metadata["name"] == "ranker_a" and metadata["outputs"][0]["name"] == "score"
    for body, tensors in zip(BODIES, extract(binary, demo / "ranker_a", demo / "store.jsonl", BODIES)):
        want = served.predict(dict(body, model="ranker_a"))["scores"]
        inputs = []
        for name, array in v2_inputs(metadata, tensors).items():
            one = triton.InferInput(name, list(array.shape), "FP32" if array.dtype == np.float32 else "INT64")
            one.set_data_from_numpy(array)
            inputs.append(one)
        result = client.infer("ranker_a", inputs, request_id="r1")
        assert result.get_response().id == "r1"
        assert result.as_numpy("score").tolist() == pytest.approx(want, rel=1e-6, abs=1e-7)

    with pytest.raises(InferenceServerException) as refused:
        client.get_model_metadata("no_such_model")
    assert refused.value.status() == "StatusCode.NOT_FOUND" and "no_such_model" in str(refused.value)
    bad = triton.InferInput("dense", [1, 2], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 2), dtype=np.float32))
    with pytest.raises(InferenceServerException) as refused:
        client.infer("ranker_a", [bad])
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT" and "inputs" in str(refused.value)
    index = triton.InferInput("dense", [1, 6], "FP32")
    index.set_data_from_numpy(np.zeros((1, 6), dtype=np.float32))
    short = triton.InferInput("item_category_indices", [3], "INT64")
    short.set_data_from_numpy(np.array([1, 2, 3], dtype=np.int64))
    with pytest.raises(InferenceServerException) as refused:
        client.infer("ranker_a", [index, short])
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_priority_levels_as_tritons_client_and_ranking_name_them(demo, binary, serve, stubs):
    pb, pb_grpc, _, _ = stubs
    server = serve([demo / "ranker_a"], feature_store=demo / "store.jsonl",
                   args=["--grpc-port", "0", "--priority-levels", "2", "--priority-level", "1:allow_timeout_override=true"])
    client = triton.InferenceServerClient(url=f"127.0.0.1:{server.grpc_port}")
    metadata = client.get_model_metadata("ranker_a", as_json=True)
    body = BODIES[0]
    tensors = next(iter(extract(binary, demo / "ranker_a", demo / "store.jsonl", [body])))
    inputs = []
    for name, array in v2_inputs(metadata, tensors).items():
        one = triton.InferInput(name, list(array.shape), "FP32" if array.dtype == np.float32 else "INT64")
        one.set_data_from_numpy(array)
        inputs.append(one)
    want = server.predict(dict(body, model="ranker_a"))["scores"]
    # Triton's client sends the level as a uint64 parameter, the timeout (us) as an int64 one.
    result = client.infer("ranker_a", inputs, priority=1, timeout=100000)
    assert result.as_numpy("score").tolist() == pytest.approx(want, rel=1e-6, abs=1e-7)
    with pytest.raises(InferenceServerException) as refused:
        client.infer("ranker_a", inputs, priority=3)
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT" and "parameters.priority" in str(refused.value)
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        ranking = pb_grpc.RankingStub(channel)
        assert list(ranking.Predict(ranking_request(pb, body, priority=1), timeout=10).scores) == \
            pytest.approx(want, rel=1e-6, abs=1e-7)
        with pytest.raises(grpc.RpcError) as refused:
            ranking.Predict(ranking_request(pb, body, priority=5), timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details().startswith("priority:"), refused.value.details()
    text = metrics(server)
    assert 'numaserve_priority_answered_total{priority="1"} 2\n' in text, text
    assert 'numaserve_priority_answered_total{priority="2"} 1\n' in text, text  # /predict naming none: the lowest


@pytest.fixture
def repository_served(demo, serve, tmp_path):
    repository = tmp_path / "repository"
    for model in ("ranker_a", "ranker_b"):
        shutil.copytree(demo / model, repository / model / "1")
    return serve([], feature_store=demo / "store.jsonl",
                 args=["--model-repository", repository, "--model-control-mode", "explicit", "--admin-port", "0",
                       "--grpc-port", "0"])


def test_the_repository_rpcs_are_on_the_admin_port(repository_served, stubs):
    """Triton's repository calls through its gRPC client on the admin port,
    which takes HTTP/2 beside HTTP/1.1; the gRPC data port refuses them,
    naming the admin port, as the admin port refuses data calls."""
    pb, pb_grpc, health, health_grpc = stubs
    server = repository_served
    admin = triton.InferenceServerClient(f"127.0.0.1:{server.admin_port}")
    data = triton.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")

    def states(ready=False):
        return {(m["name"], m["version"], m["state"]) for m in
                admin.get_model_repository_index(as_json=True).get("models", []) if not ready or m["state"] == "READY"}

    assert states() == {("ranker_a", "1", "READY"), ("ranker_b", "1", "READY")}
    admin.unload_model("ranker_b")
    assert ("ranker_b", "1", "UNAVAILABLE") in states()
    assert data.is_model_ready("ranker_a")  # the other model serves on
    with pytest.raises(InferenceServerException) as refused:
        data.get_model_metadata("ranker_b")
    assert refused.value.status() == "StatusCode.NOT_FOUND"
    admin.load_model("ranker_b")
    assert states() == {("ranker_a", "1", "READY"), ("ranker_b", "1", "READY")}
    assert data.is_model_ready("ranker_b")

    for call, code, named in [
        (lambda: admin.load_model("no_such_model"), "StatusCode.NOT_FOUND", "no_such_model"),
        (lambda: admin.load_model("../ranker_a"), "StatusCode.INVALID_ARGUMENT", "name"),
        (lambda: admin.load_model("ranker_a", config="{}"), "StatusCode.INVALID_ARGUMENT", "parameters"),
        (lambda: data.get_model_repository_index(), "StatusCode.UNIMPLEMENTED", "on the admin port"),
        (lambda: admin.get_model_metadata("ranker_a"), "StatusCode.UNIMPLEMENTED", "on the main port"),
    ]:
        with pytest.raises(InferenceServerException) as refused:
            call()
        assert refused.value.status() == code, str(refused.value)
        assert named in str(refused.value)
    # The probes' calls answer on both ports; the admin port still speaks HTTP/1.1.
    for port in (server.admin_port, server.grpc_port):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert health_grpc.HealthStub(channel).Check(health.HealthCheckRequest(), timeout=10).status == \
                health.HealthCheckResponse.SERVING
    with urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    assert 'numaserve_grpc_requests_total{method="/inference.GRPCInferenceService/RepositoryModelLoad",code="OK"} 1' in text
