"""KServe's own gRPC client (kserve.InferenceGRPCClient) against the gRPC
port: readiness, then infer with tensors as typed contents and as raw
bytes, scoring as /predict does; an unknown model comes back NOT_FOUND.
Run in a process of its own (KServe's and Triton's generated protobuf code
define the same names)."""
import asyncio

import grpc
import pytest

from conftest import extract, kserve_inputs

BODIES = [
    {"user": {"id": "u3"}, "context": {"hour": 9}, "items": [{"id": "i1"}, {"id": "i7"}]},
    {"user": {"id": "nobody"}, "items": [{"id": f"i{k}"} for k in range(12)]},
]


def test_kserves_grpc_client(demo, binary, serve):
    from kserve import InferenceGRPCClient, InferRequest

    server = serve([demo / "ranker_a"], feature_store=demo / "store.jsonl", args=["--grpc-port", "0"])
    expected = [server.predict(dict(b, model="ranker_a"))["scores"] for b in BODIES]
    metadata = server.request("GET", "/v2/models/ranker_a")[1]

    async def calls():
        async with InferenceGRPCClient(f"127.0.0.1:{server.grpc_port}", timeout=30) as client:
            assert await client.is_server_live() and await client.is_server_ready()
            assert await client.is_model_ready("ranker_a")
            scores = []
            for tensors in extract(binary, demo / "ranker_a", demo / "store.jsonl", BODIES):
                for binary_data in (False, True):
                    inputs = kserve_inputs(metadata, tensors, binary_data)
                    reply = await client.infer(InferRequest(model_name="ranker_a", infer_inputs=inputs, request_id="k1"))
                    assert reply.id == "k1"
                    scores.append(reply.outputs[0].as_numpy().tolist())
            with pytest.raises(grpc.RpcError) as refused:
                await client.is_model_ready("no_such_model")
            assert refused.value.code() == grpc.StatusCode.NOT_FOUND
            return scores

    got = asyncio.run(calls())
    assert len(got) == 2 * len(expected)
    for g, want in zip(got, [w for w in expected for _ in (False, True)]):
        assert g == pytest.approx(want, rel=1e-6, abs=1e-7)
