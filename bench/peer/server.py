"""The peer numaserve is measured against: a user's obvious alternative.

The same TorchScript model.pt, the same model.yaml feature contract (XXH64
hash, transforms, defaults: the numaserve package in python/, the training
side's copy of the service's extraction) and feature store, the same POST
/predict JSON and refusals,
served by FastAPI + uvicorn + PyTorch from Debian (run it with
/usr/bin/python3). bench/modes.sh starts it pinned to the same CPUs as
numaserve and checks that both return the same scores before timing them.

Environment: PEER_MODEL_DIR (model.pt + model.yaml), PEER_STORE
(store.jsonl), PEER_THREADS (torch intra-op threads per worker, default 1).
"""
import json
import os
import sys

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

# The package (python/), installed or in place: the feature contract is
# the service's, proven bit-identical by tests/python/test_differential.py.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import numaserve  # noqa: E402

MODEL_DIR = os.environ["PEER_MODEL_DIR"]
torch.set_num_threads(int(os.environ.get("PEER_THREADS", "1")))

SPEC = numaserve.ModelSpec.load(MODEL_DIR)
STORE = numaserve.FeatureStore.from_jsonl(os.environ["PEER_STORE"])
SPEC.check_store(STORE)  # what the service checks at start
MODEL = torch.jit.load(os.path.join(MODEL_DIR, "model.pt"))
MODEL.eval()

app = FastAPI()


@app.post("/predict")
async def predict(request: Request):
    try:
        parsed = numaserve.parse_request(await request.body())
        dense, indices, offsets = SPEC.extract(parsed, STORE)
    except numaserve.RequestError as e:
        return JSONResponse(e.to_json(), status_code=e.status)
    with torch.inference_mode():
        scores = MODEL(dense, indices, offsets)
    return Response(json.dumps({"model": SPEC.name, "model_version": SPEC.version, "request_id": parsed.request_id,
                                "scores": scores.reshape(-1).tolist()}),
                    media_type="application/json")


@app.get("/readyz")
async def readyz():
    return Response("ready\n", media_type="text/plain")
