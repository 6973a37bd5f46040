"""numaserve's feature contract, for training.

A model numaserve serves reads its features through model.yaml: ids hashed
into embedding rows, numbers transformed and clipped, defaults, values from
the request or the feature store. A training pipeline that computes any of
it differently trains on other inputs than the model is served with, and
nothing fails: scores are just worse. This package is the training side's
copy of the service's extraction, proven bit-identical to it by
tests/python/test_differential.py (against `numaserve extract`).

    import numaserve
    spec = numaserve.ModelSpec.load("models/ranker_a")        # model.yaml
    store = numaserve.FeatureStore.from_jsonl("store.jsonl")  # the embedded store
    dense, indices, offsets = spec.extract(
        {"user": {"id": "u1"}, "items": [{"id": "i1"}, {"id": "i2"}]}, store)
    scores = model(dense, indices, offsets)                   # model.pt's forward
    numaserve.export(model, spec, "models/ranker_a_v2")        # checked, atomic

Also: spec.extract_rows(user, context, items, store) for training rows
without /predict's limits, numaserve.collate(batches) to join batches as
the service's batcher does, numaserve.RequestDataset over JSON Lines of
requests with labels. Refusals raise RequestError (SpecError, StoreError
for model.yaml and the store) with the service's .field and .message.
"""
from .errors import NumaserveError, RequestError, SpecError, StoreError
from .spec import FeatureSpec, ModelSpec
from .store import FeatureStore
from .request import Entity, Request, RequestLimits, parse_request
from .extract import bucket, collate
from .data import RequestDataset
from .export import ExportError, export

__all__ = [
    "ModelSpec", "FeatureSpec", "FeatureStore", "RequestLimits", "Request", "Entity", "parse_request",
    "bucket", "collate", "RequestDataset", "export", "NumaserveError", "RequestError", "SpecError",
    "StoreError", "ExportError",
]
