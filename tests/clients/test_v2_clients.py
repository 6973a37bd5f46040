"""The KServe v2 routes driven by real clients: Triton's (tritonclient.http)
and KServe's own (kserve.InferenceRESTClient), with tensors as JSON and in
Triton's binary tensor data extension (both clients' default).

Each checks server and model metadata and readiness, then sends the tensors
the service itself extracts for a /predict request (`numaserve extract`) as
an infer request; the scores must equal /predict's for that request. A bad
input must come back as the client's error carrying the field, not a hang.
"""
import asyncio

import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from conftest import extract, kserve_inputs, store_lines, v2_inputs

BODIES = [
    {"user": {"id": "u3"}, "context": {"hour": 9, "device": "app"}, "items": [{"id": "i1"}, {"id": "i7"}, {"id": "i12"}]},
    {"user": {"id": "u9"}, "items": [{"id": "i4"}]},
    {"user": {"id": "nobody"}, "items": [{"id": f"i{k}"} for k in range(30)]},
]


@pytest.fixture
def served(demo, serve):
    server = serve([demo / "ranker_a", demo / "ranker_b"], feature_store=demo / "store.jsonl")
    expected = [server.predict(dict(b, model="ranker_a"))["scores"] for b in BODIES]
    return server, expected


def test_tritons_client(demo, binary, served):
    server, expected = served
    client = triton.InferenceServerClient(url=f"127.0.0.1:{server.port}")
    assert client.is_server_live() and client.is_server_ready()
    assert client.get_server_metadata()["name"] == "numaserve"
    assert client.is_model_ready("ranker_a") and client.is_model_ready("ranker_b")
    metadata = client.get_model_metadata("ranker_a")
    assert metadata["name"] == "ranker_a" and metadata["outputs"][0]["name"] == "score"
    for body, want, tensors in zip(BODIES, expected, extract(binary, demo / "ranker_a", demo / "store.jsonl", BODIES)):
        # JSON both ways; binary inputs with JSON scores; the client's default: binary both ways.
        for binary_in, binary_out in ((False, False), (True, False), (True, True)):
            inputs = []
            for name, array in v2_inputs(metadata, tensors).items():
                one = triton.InferInput(name, list(array.shape), "FP32" if array.dtype == np.float32 else "INT64")
                one.set_data_from_numpy(array, binary_data=binary_in)
                inputs.append(one)
            outputs = None if binary_out else [triton.InferRequestedOutput("score", binary_data=False)]
            result = client.infer("ranker_a", inputs, request_id="r1", outputs=outputs)
            assert result.get_response()["id"] == "r1"
            assert ("data" in result.get_output("score")) != binary_out
            assert result.as_numpy("score").tolist() == pytest.approx(want, rel=1e-6, abs=1e-7)

    with pytest.raises(InferenceServerException) as refused:
        client.get_model_metadata("no_such_model")
    assert "no_such_model" in str(refused.value)
    bad = triton.InferInput("dense", [1, 2], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 2), dtype=np.float32), binary_data=False)
    with pytest.raises(InferenceServerException) as refused:
        client.infer("ranker_a", [bad], outputs=[triton.InferRequestedOutput("score", binary_data=False)])
    assert refused.value.status() == "400" and "inputs" in str(refused.value)
    # Binary data that does not fill its tensor's shape is refused naming it.
    short = triton.InferInput("dense", [2, 6], "FP32")
    short.set_data_from_numpy(np.zeros((2, 6), dtype=np.float32))
    short._raw_data = short._raw_data[:24]  # the client checks shapes itself: send what a broken one would
    short._parameters["binary_data_size"] = 24
    with pytest.raises(InferenceServerException) as refused:
        client.infer("ranker_a", [short])
    assert refused.value.status() == "400" and "inputs[0].parameters.binary_data_size" in str(refused.value)


def test_kserves_client(demo, binary, served):
    from kserve import InferRequest, InferenceRESTClient, RESTConfig

    server, expected = served

    async def calls():
        client = InferenceRESTClient(RESTConfig(protocol="v2", timeout=30))
        try:
            assert await client.is_server_live(server.url)
            assert await client.is_server_ready(server.url)
            assert await client.is_model_ready(server.url, "ranker_a")
            metadata = server.request("GET", "/v2/models/ranker_a")[1]
            scores = []
            for tensors in extract(binary, demo / "ranker_a", demo / "store.jsonl", BODIES):
                for binary_data in (False, True):
                    inputs = kserve_inputs(metadata, tensors, binary_data)
                    request = InferRequest(model_name="ranker_a", infer_inputs=inputs,
                                           parameters={"binary_data_output": binary_data})
                    reply = await client.infer(server.url, request, model_name="ranker_a")
                    scores.append(reply.outputs[0].as_numpy().tolist())
            return scores
        finally:
            await client.close()

    got = asyncio.run(calls())
    assert len(got) == 2 * len(expected)
    for g, want in zip(got, [w for w in expected for _ in (False, True)]):
        assert g == pytest.approx(want, rel=1e-6, abs=1e-7)
