"""The peer numaserve is measured against: a user's obvious alternative.

The same TorchScript model.pt, the same model.yaml feature contract (XXH64
hash, transforms, defaults) and feature store, the same POST /predict JSON,
served by FastAPI + uvicorn + PyTorch from Debian (run it with
/usr/bin/python3). bench/modes.sh starts it pinned to the same CPUs as
numaserve and checks that both return the same scores before timing them.

Environment: PEER_MODEL_DIR (model.pt + model.yaml), PEER_STORE
(store.jsonl), PEER_THREADS (torch intra-op threads per worker, default 1).
"""
import json
import math
import os

import torch
import xxhash
import yaml
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

MODEL_DIR = os.environ["PEER_MODEL_DIR"]
torch.set_num_threads(int(os.environ.get("PEER_THREADS", "1")))

with open(os.path.join(MODEL_DIR, "model.yaml")) as f:
    SPEC = yaml.safe_load(f)
MODEL = torch.jit.load(os.path.join(MODEL_DIR, "model.pt"))
MODEL.eval()
SEED = int(SPEC.get("hash_seed", 0))
TABLES = SPEC["tables"]
DENSE = [f for f in SPEC["features"] if f["kind"] == "numeric"]
SPARSE = [f for f in SPEC["features"] if f["kind"] != "numeric"]

USERS, ITEMS = {}, {}
with open(os.environ["PEER_STORE"]) as f:
    for line in f:
        if line.strip():
            entity = json.loads(line)
            (USERS if entity["kind"] == "user" else ITEMS)[str(entity["id"])] = entity.get("features", {})


def default(feature):
    if "default" in feature:
        return feature["default"]
    return {"numeric": 0.0, "id": "", "id_list": []}[feature["kind"]]


def value(feature, inline, stored, entity_id):
    name = feature["name"]
    if name in inline:
        return inline[name]
    if stored is not None and name in stored:
        return stored[name]
    if name == "id" and entity_id:
        return entity_id
    return default(feature)


def numeric(feature, x):
    x = float(x)
    transform = feature.get("transform", "none")
    if transform == "log1p":
        x = math.log1p(x)
    elif transform == "standardize":
        x = (x - feature.get("mean", 0)) / feature.get("std", 1)
    if "clip" in feature:
        x = min(max(x, feature["clip"][0]), feature["clip"][1])
    return x


def text(v):
    # The hash contract: integer ids hash as their decimal text.
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v).encode()


def ids(feature, v):
    rows = TABLES[feature["table"]]
    if feature["kind"] == "id":
        return [xxhash.xxh64_intdigest(text(v), SEED) % rows]
    keep = feature.get("max_len", 0) or len(v)
    return [xxhash.xxh64_intdigest(text(x), SEED) % rows for x in v[:keep]]


def entity_value(feature, user, context, item):
    source = feature["source"]
    if source == "context":
        return value(feature, context, None, "")
    entity, table = (user, USERS) if source == "user" else (item, ITEMS)
    entity_id = str(entity.get("id", ""))
    return value(feature, entity.get("features", {}), table.get(entity_id), entity_id)


app = FastAPI()


@app.post("/predict")
async def predict(request: Request):
    body = await request.json()
    user, context, items = body.get("user", {}), body.get("context", {}), body.get("items", [])
    if not items:
        return JSONResponse({"error": "items: empty", "field": "items"}, status_code=400)
    dense = [[numeric(f, entity_value(f, user, context, item)) for f in DENSE] for item in items]
    indices, offsets = [], []
    for f in SPARSE:
        flat, starts = [], []
        for item in items:
            starts.append(len(flat))
            flat.extend(ids(f, entity_value(f, user, context, item)))
        indices.append(torch.tensor(flat, dtype=torch.long))
        offsets.append(torch.tensor(starts, dtype=torch.long))
    with torch.inference_mode():
        scores = MODEL(torch.tensor(dense, dtype=torch.float32).reshape(len(items), len(DENSE)), indices, offsets)
    return Response(json.dumps({"model": SPEC["name"], "version": str(SPEC["version"]),
                                "request_id": body.get("request_id", ""), "scores": scores.reshape(-1).tolist()}),
                    media_type="application/json")


@app.get("/readyz")
async def readyz():
    return Response("ready\n", media_type="text/plain")
