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
requests with labels, numaserve.LocalServer(model_dir, feature_store) to
serve an exported directory on loopback and compare its scores,
numaserve.drift.compare(fp32, bf16, labels) for how far a bf16 or int8
serving's scores stray from fp32's (as `numaserve check-model --precision
bf16` reports it; model.yaml's precision may be bf16 or int8, and its
embedding_precision bf16, int8 or int4: spec.precision and
spec.embedding_precision). Refusals
raise RequestError (SpecError, StoreError for model.yaml and the store)
with the service's .field and .message.
"""
import importlib

# The names and the module each lives in. Imported on first use, so that
# the torch-free parts (numaserve.local, numaserve.errors) also work where
# torch is not installed, e.g. beside clients that want another numpy.
_HOMES = {
    "NumaserveError": "errors", "RequestError": "errors", "SpecError": "errors", "StoreError": "errors",
    "ModelSpec": "spec", "FeatureSpec": "spec", "FeatureStore": "store",
    "Entity": "request", "Request": "request", "RequestLimits": "request", "parse_request": "request",
    "bucket": "extract", "collate": "extract", "RequestDataset": "data",
    "ExportError": "export", "export": "export", "LocalServer": "local", "ServedError": "local",
    "drift": None,
}
# extract.py gives ModelSpec its extract(), check_store() and extract_rows():
# a ModelSpec without them would be half a class.
_WITH = {"spec": ("extract",)}

__all__ = list(_HOMES)


def __getattr__(name):
    if name not in _HOMES:
        raise AttributeError(f"module 'numaserve' has no attribute {name!r}")
    home = _HOMES[name]
    if home is None:  # a module of its own: numaserve.drift
        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    module = importlib.import_module(f".{home}", __name__)
    for also in _WITH.get(home, ()):
        importlib.import_module(f".{also}", __name__)
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_HOMES))
