"""Feature extraction: a request (a user, a context, N items) and the store
in, the model's inputs out -- the service's service/features/extract.cpp,
bit for bit.

    dense    float32 [N, D]: model.yaml's numeric features in order
    indices  one int64 tensor per id / id_list feature, in model.yaml order
    offsets  one int64 tensor per such feature: where each row's ids start

The contract, each point of which silently costs accuracy when training
and serving disagree:
  * An id's row is XXH64(utf8(id), hash_seed) % rows(table). An integer id
    is its decimal text (42 and "42" are one id). A number given for an id
    feature is a double, written as the whole number it holds; from 2^53 on
    it is refused, since the JSON number may no longer hold the client's digits.
  * A numeric value is transformed (log1p, or (x - mean) / std), then
    clipped, in double precision, then rounded to float32 once.
  * A value comes from the request's inline features, else the store's
    entity, else (a feature named "id") the entity's own id, else the
    feature's default. User and context features are read once and shared
    by every row; item features once per item.
  * id_list features keep their first max_len ids.
  * Refusals come in the service's order -- unknown inline features first
    (by name), then dense features column by column, then bags -- and name
    the same field.
"""
import math
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
import xxhash

from .errors import RequestError, StoreError
from .request import NO_LIMITS, Entity, Request, RequestLimits, parse_request
from .spec import FeatureSpec, ModelSpec
from .store import FeatureStore

Batch = Tuple[torch.Tensor, List[torch.Tensor], List[torch.Tensor]]


def bucket(id_text: str, seed: int, rows: int) -> int:
    """The embedding row of an id (int64, as the service casts it)."""
    # surrogateescape: model.yaml's bytes that are not UTF-8 hash as those bytes.
    row = xxhash.xxh64_intdigest(id_text.encode("utf-8", "surrogateescape"), seed) % rows
    return row - 2**64 if row >= 2**63 else row


def _type_name(value):
    return "a number" if isinstance(value, float) else "a string" if isinstance(value, str) else "a list"


class _Found:
    """Where a feature's value was found: inline, store, entity id, default."""

    __slots__ = ("value", "origin", "entity_id")

    def __init__(self, value, origin, entity_id):
        self.value, self.origin, self.entity_id = value, origin, entity_id


def _lookup(spec: FeatureSpec, inline, stored, entity_id):
    if spec.name in inline:
        return _Found(inline[spec.name], "inline", entity_id)
    if stored is not None and spec.name in stored:
        return _Found(stored[spec.name], "store", entity_id)
    if spec.name == "id" and entity_id:
        return _Found(entity_id, "id", entity_id)
    return _Found(spec.default, "default", entity_id)


def _field(spec, found, source, item):
    entity = {"user": "user", "context": ""}.get(source, f"items[{item}]")
    features = entity + ".features" if entity else "context"
    if found.origin == "inline":
        return f"{features}.{spec.name}"
    if found.origin == "store":
        return f"feature store {'user' if source == 'user' else 'item'} '{found.entity_id}' {spec.name}"
    if found.origin == "id":
        return entity + ".id"
    return f"{features}.{spec.name} (default)"


def _refuse(spec, found, source, item, message):
    field = _field(spec, found, source, item)
    return RequestError(field, f"{field}: {message}")


def _numeric(spec: FeatureSpec, found, source, item=0) -> float:
    """The feature's value, transformed and clipped, in double precision."""
    x = found.value
    if found.origin == "id" or not isinstance(x, float):
        got = "an id" if found.origin == "id" else _type_name(x)
        raise _refuse(spec, found, source, item, f"want a number, got {got}")
    if not math.isfinite(x):
        raise _refuse(spec, found, source, item, "want a finite number")
    if spec.transform == "log1p":
        if x <= -1:
            raise _refuse(spec, found, source, item, "log1p needs a value above -1, got %f" % x)
        x = math.log1p(x)  # glibc's log1p, as std::log1p
    elif spec.transform == "standardize":
        x = (x - spec.mean) / spec.std
    if spec.clip is not None:
        low, high = spec.clip
        x = low if x < low else high if high < x else x  # std::clamp, NaN and -0.0 included
    return x


def _ids(spec: FeatureSpec, found, source, item, seed, rows) -> List[int]:
    if found.origin == "id":
        return [bucket(found.entity_id, seed, rows)]
    value = found.value
    if spec.kind == "id":
        if isinstance(value, str):
            return [bucket(value, seed, rows)]
        if isinstance(value, float) and math.isfinite(value) and value == math.floor(value):
            if abs(value) >= 2.0**53:  # the service's rule: from 2^53 on a JSON number may have lost digits
                raise _refuse(spec, found, source, item,
                              "want an id: a whole number of 2^53 or more loses digits as a JSON number; send it as a string")
            return [bucket(str(int(value)), seed, rows)]  # 42 hashes as "42"
        raise _refuse(spec, found, source, item, f"want an id, got {_type_name(value)}")
    if not isinstance(value, list):
        raise _refuse(spec, found, source, item, f"want a list of ids, got {_type_name(value)}")
    kept = value[: spec.max_len] if spec.max_len else value
    return [bucket(v, seed, rows) for v in kept]


def _check_known(spec: ModelSpec, features, source, path):
    # Sorted: the service keeps features in a std::map and reports the first.
    for name in sorted(features):
        if spec.feature(name, source) is None:
            raise RequestError(f"{path}.{name}",
                               f"{path}.{name}: model {spec.name} has no {source} feature of that name")


def extract_request(spec: ModelSpec, request: Request, store: Optional[FeatureStore] = None):
    """A parsed Request as numpy arrays: (dense float32 [N, D], [indices int64], [offsets int64])."""
    _check_known(spec, request.user.features, "user", "user.features")
    _check_known(spec, request.context, "context", "context")
    for i, item in enumerate(request.items):
        _check_known(spec, item.features, "item", f"items[{i}].features")
    user, items = request.user, request.items
    stored_user = store.user(user.id) if store is not None and user.id else None
    stored_items = [store.item(item.id) if store is not None else None for item in items]

    def find(f, i):
        if f.source == "user":
            return _lookup(f, user.features, stored_user, user.id)
        if f.source == "context":
            return _lookup(f, request.context, None, None)
        return _lookup(f, items[i].features, stored_items[i], items[i].id)

    n = len(items)
    dense = np.zeros((n, len(spec.dense_features)), dtype=np.float64)
    for c, f in enumerate(spec.dense_features):
        if f.source != "item":
            dense[:, c] = _numeric(f, find(f, 0), f.source)
        else:
            for i in range(n):
                dense[i, c] = _numeric(f, find(f, i), "item", i)
    indices, offsets = [], []
    for f in spec.sparse_features:
        rows = spec.tables[f.table]
        if f.source != "item":
            shared = _ids(f, find(f, 0), f.source, 0, spec.hash_seed, rows)
            flat = shared * n
            starts = [i * len(shared) for i in range(n)]
        else:
            flat, starts = [], []
            for i in range(n):
                starts.append(len(flat))
                flat.extend(_ids(f, find(f, i), "item", i, spec.hash_seed, rows))
        indices.append(np.array(flat, dtype=np.int64))
        offsets.append(np.array(starts, dtype=np.int64))
    with np.errstate(over="ignore"):  # beyond float32: inf, as the C++ cast gives
        return dense.astype(np.float32), indices, offsets


def _tensors(dense, indices, offsets) -> Batch:
    return (torch.from_numpy(dense), [torch.from_numpy(a) for a in indices], [torch.from_numpy(a) for a in offsets])


def _find_model(spec: ModelSpec, request: Request):
    if request.model is not None and request.model != spec.name:
        raise RequestError("model", f"model '{request.model}' is not served here", status=404)


def _extract(self: ModelSpec, request, store: Optional[FeatureStore] = None,
             limits: RequestLimits = RequestLimits()) -> Batch:
    """A /predict body (dict, JSON str or bytes) as the model's forward inputs
    (dense, indices, offsets): exactly what the service would feed it.
    Refusals raise RequestError naming the field the service's reply names
    (status 404, field "model", for another model's name)."""
    parsed = request if isinstance(request, Request) else parse_request(request, limits)
    _find_model(self, parsed)
    if store is not None:
        self.check_store(store)
    return _tensors(*extract_request(self, parsed, store))


def _entity(value):
    """A training row's user or item: a dict like /predict's ({"id", "features"})
    or an Entity."""
    if isinstance(value, Entity):
        return {"id": value.id, "features": value.features}
    return value


def _extract_rows(self: ModelSpec, user=None, context=None, items: Sequence = (),
                  store: Optional[FeatureStore] = None) -> Batch:
    """Training rows: one user ({"id": ..., "features": {...}}, or None), one
    context ({feature: value}), and items (each {"id": ..., "features": ...}),
    without /predict's size limits; otherwise exactly extract()."""
    body = {"user": _entity(user) or {}, "items": [_entity(item) for item in items]}
    if context:
        body["context"] = context
    return _extract(self, body, store, NO_LIMITS)


def _check_store(self: ModelSpec, store: FeatureStore):
    """What the service checks when it opens a store for a model: every
    stored item extracted once, a value the model cannot read refused as
    "model NAME: feature store item 'ID' FEATURE: ...". (The service visits
    items in hash order, so with several bad items it may name another.)"""
    if store in self._checked_stores:
        return
    for item_id in store.items:
        try:
            extract_request(self, Request(user=Entity(), context={}, items=[Entity(item_id)]), store)
        except RequestError as e:
            raise StoreError(e.field, f"model {self.name}: {e.message}") from None
    self._checked_stores.add(store)


ModelSpec.extract = _extract
ModelSpec.extract_rows = _extract_rows
ModelSpec.check_store = _check_store


def collate(samples):
    """Joins extracted batches of one model, in order, into one batch -- the
    service's dynamic batcher's concat: rows stacked, each bag's offsets
    rebased onto its joined indices. Samples may also be (batch, labels)
    pairs (what RequestDataset gives); then (batch, labels) comes back."""
    samples = list(samples)
    if not samples:
        raise ValueError("collate: no samples")
    if len(samples[0]) == 2:
        batch = collate([s[0] for s in samples])
        return batch, torch.cat([torch.as_tensor(s[1], dtype=torch.float32).reshape(-1) for s in samples])
    dense = torch.cat([s[0] for s in samples])
    indices, offsets = [], []
    for k in range(len(samples[0][1])):
        base, parts = 0, []
        for s in samples:
            parts.append(s[2][k] + base)
            base += s[1][k].numel()
        indices.append(torch.cat([s[1][k] for s in samples]))
        offsets.append(torch.cat(parts))
    return dense, indices, offsets
