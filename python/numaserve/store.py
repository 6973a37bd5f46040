"""The embedded feature store's JSON Lines file (service/feature_store/embedded.cpp).

    {"kind": "user", "id": "u42", "features": {"age": 31, "country": "fr"}}
    {"kind": "item", "id": "i7",  "features": {"price": 12.5, "tags": ["a", "b"]}}

Read as the service reads it, with nlohmann's JSON grammar: a number is a
double (integers too), a list holds strings or integers (an integer as its
decimal text), an integer id is its decimal text, blank lines are skipped,
and each refusal has the service's message and field.
"""
import json
import math
import os
from typing import Dict, Optional

from .errors import StoreError

Features = Dict[str, object]


class _NotJson(Exception):
    pass


def _float(text):
    value = float(text)
    if math.isinf(value):
        raise _NotJson()  # nlohmann: "number overflow"
    return value


def _int(text):
    value = int(text)
    # nlohmann keeps integers beyond 64 bits as doubles: not integers any more.
    return value if -(2**63) <= value < 2**64 else _float(text)


def _reject(_):
    raise _NotJson()


def _parse_line(line):
    """One line as nlohmann::json::parse takes it, or None if it refuses it."""
    if b"\0" in line:
        line = line[: line.index(b"\0")]  # nlohmann reads a NUL as the end of its input
    if line.startswith(b"\xef\xbb\xbf"):
        line = line[3:]
    try:
        text = line.decode("utf-8")
        value = json.loads(text, parse_float=_float, parse_int=_int, parse_constant=_reject)
    except (_NotJson, ValueError, RecursionError):
        return None
    return None if _has_surrogate(value) else value


def _has_surrogate(value):
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if any("\ud800" <= c <= "\udfff" for c in v):
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def _is_integer(v):
    return isinstance(v, int) and not isinstance(v, bool)


def to_feature_value(v):
    """A JSON value as a stored feature value (float, str or list of str); None if it is none."""
    if _is_integer(v) or isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        ids = []
        for item in v:
            if isinstance(item, str):
                ids.append(item)
            elif _is_integer(item):
                ids.append(str(item))
            else:
                return None
        return ids
    return None


class FeatureStore:
    """Users' and items' stored features by id, as the service's embedded
    store holds them. Build it from the service's file (from_jsonl) or from
    dicts of id -> {feature: value} (values as JSON would carry them)."""

    def __init__(self, users: Optional[Dict[str, Features]] = None, items: Optional[Dict[str, Features]] = None,
                 file: str = "features"):
        self.file = file
        self.users: Dict[str, Features] = {}
        self.items: Dict[str, Features] = {}
        for table, entities in ((self.users, users or {}), (self.items, items or {})):
            for entity_id, features in entities.items():
                table[str(entity_id)] = self._features(features, f"{file} '{entity_id}'")

    @staticmethod
    def _features(values, where):
        out = {}
        for name in sorted(values):  # nlohmann's object order: the first bad one is reported
            converted = to_feature_value(values[name])
            if converted is None:
                raise StoreError(name, f"{where}: feature '{name}' must be a number, a string or a list of ids")
            out[name] = converted
        return out

    @classmethod
    def from_jsonl(cls, path):
        """The service's --feature-store file; refuses (StoreError) what the service refuses."""
        with open(path, "rb") as f:
            return cls.parse(f.read(), os.fspath(path))

    @classmethod
    def parse(cls, data, file="store.jsonl"):
        """JSON Lines text (bytes or str); `file` names it in refusals."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        store = cls(file=file)
        for line_no, line in enumerate(data.split(b"\n"), 1):
            if not line.strip(b" \t\r"):
                continue
            where = f"{file} line {line_no}"
            entity = _parse_line(line)
            if not isinstance(entity, dict):
                raise StoreError(file, f"{where}: not a JSON object")
            kind = entity.get("kind")
            if kind not in ("user", "item"):
                raise StoreError("kind", f'{where}: kind must be "user" or "item"')
            entity_id = entity.get("id")
            if not isinstance(entity_id, str) and not _is_integer(entity_id):
                raise StoreError("id", f"{where}: id must be a string or an integer")
            values = entity.get("features", {})
            if not isinstance(values, dict):
                raise StoreError("features", f"{where}: features must be an object")
            features = cls._features(values, where)
            key = entity_id if isinstance(entity_id, str) else str(entity_id)
            table = store.users if kind == "user" else store.items
            if key in table:
                raise StoreError("id", f"{where}: {kind} '{key}' appears twice")
            table[key] = features
        return store

    def user(self, entity_id) -> Optional[Features]:
        return self.users.get(entity_id)

    def item(self, entity_id) -> Optional[Features]:
        return self.items.get(entity_id)

    def __repr__(self):
        return f"FeatureStore({len(self.users)} users, {len(self.items)} items)"
