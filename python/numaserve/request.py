"""The /predict body, read exactly as the service reads it (service/codec/predict_json.cpp).

    {"model"?: "ranker_a", "request_id"?: "r1",
     "user": {"id": "u1", "features"?: {...}},
     "context"?: {"hour": 13},
     "items": [{"id": "i1", "features"?: {...}}, ...]}

The service validates the whole body as JSON first (simdjson), so a syntax
error anywhere is refused as one (field "body"), then walks it in document
order and stops at the first value that breaks the schema. Both are
reproduced here: Python's json module is made as strict as simdjson (no
NaN/Infinity, integers within 64 bits, finite doubles, no lone surrogates,
at most 1024 levels), members are kept in order with their duplicates (the
last one wins, as in the service), and the walk below mirrors the
service's, field names and messages included.

A request given as a Python dict is read as json.dumps(dict) would be.
"""
import json
import math
import numbers
import re
import sys
from dataclasses import dataclass, field as dataclass_field
from typing import Dict, List, Optional

from .errors import RequestError

MAX_DEPTH = 1024  # simdjson's DEFAULT_MAX_DEPTH


@dataclass(frozen=True)
class RequestLimits:
    """What one /predict may carry (service/api/config.h); None: no limit."""

    max_items: Optional[int] = 2000
    max_features_per_entity: Optional[int] = 256
    max_list_length: Optional[int] = 1024


NO_LIMITS = RequestLimits(None, None, None)


@dataclass
class Entity:
    """A user or an item: its id (an integer id as its decimal text) and its
    inline features (float, str or list of str), which override the store's."""

    id: str = ""
    features: Dict[str, object] = dataclass_field(default_factory=dict)


@dataclass
class Request:
    user: Entity
    context: Dict[str, object]
    items: List[Entity]
    model: Optional[str] = None
    request_id: str = ""


class _Object(list):
    """A JSON object as its members, in order, duplicates kept."""


class _Syntax(Exception):
    pass


def _syntax(detail=""):
    return RequestError("body", "body: not valid JSON" + (": " + detail if detail else ""))


_MALFORMED_NUMBER = "a malformed number, or one beyond 64-bit integers and doubles"
_SURROGATE = re.compile("[\ud800-\udfff]")


def _int(text):
    value = int(text)
    if not -(2**63) <= value < 2**64:
        raise _Syntax(_MALFORMED_NUMBER)
    return value


def _float(text):
    value = float(text)
    if math.isinf(value):
        raise _Syntax(_MALFORMED_NUMBER)
    return value


def _constant(text):
    raise _Syntax()  # NaN, Infinity, -Infinity: not JSON


def parse_json(body):
    """A body (bytes or str) as simdjson takes it: objects as _Object."""
    if isinstance(body, str):
        try:
            body = body.encode("utf-8")
        except UnicodeEncodeError:
            raise _syntax("not UTF-8") from None
    body = bytes(body)
    if body.startswith(b"\xef\xbb\xbf"):  # a UTF-8 BOM, which the service skips
        body = body[3:]
    if not body.strip(b" \t\n\r"):
        raise RequestError("body", "body: empty: want a JSON object")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _syntax("not UTF-8") from None
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * MAX_DEPTH))
    try:
        tree = json.loads(text, object_pairs_hook=_Object, parse_int=_int, parse_float=_float,
                          parse_constant=_constant)
    except _Syntax as e:
        raise _syntax(str(e)) from None
    except RecursionError:
        raise _syntax(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:  # json.JSONDecodeError
        raise _syntax("a control character inside a string" if "control character" in str(e) else "") from None
    finally:
        sys.setrecursionlimit(limit)
    check_json(tree)
    return tree


def check_json(tree):
    """What simdjson refuses that json.loads (or a dict) lets through: lone
    surrogates, depth, and, in a dict, numbers JSON cannot carry. Iterative:
    the tree may be deep."""
    stack = [(tree, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list, tuple)):
            if depth > MAX_DEPTH:
                raise _syntax(f"nested deeper than {MAX_DEPTH} levels")
            if isinstance(value, (_Object, dict)):
                members = list(_members(value))
                for k, _ in members:
                    if not isinstance(k, str):
                        raise TypeError(f"a JSON object's keys are strings, not {type(k).__name__}")
                children = []
                for k, v in members:
                    children += [(k, depth + 1), (v, depth + 1)]  # a key is checked as a string
            else:
                children = [(v, depth + 1) for v in value]
            stack.extend(reversed(children))  # in document order: the first error is the one reported
        elif isinstance(value, str):
            if _SURROGATE.search(value):
                raise _syntax("a malformed string escape")
        elif isinstance(value, bool) or value is None:
            pass
        elif isinstance(value, numbers.Integral):
            if not -(2**63) <= int(value) < 2**64:
                raise _syntax(_MALFORMED_NUMBER)
        elif isinstance(value, numbers.Real):
            if not math.isfinite(float(value)):
                raise _syntax()
        else:
            raise TypeError(f"not a JSON value: {type(value).__name__}")


def member_field(parent, key):
    """How a refusal names a member whose key the client chose: parent.key,
    or parent["key"] (JSON-quoted) when the key is empty or holds . [ or "."""
    if key and not any(c in key for c in '.["'):
        return f"{parent}.{key}" if parent else key
    return parent + "[" + json.dumps(key, ensure_ascii=False) + "]"


def _bad(field, message):
    return RequestError(field, f"{field}: {message}")


def _members(value):
    return value.items() if isinstance(value, dict) else value


def _is_object(value):
    return isinstance(value, (_Object, dict))


def _is_array(value):
    return isinstance(value, (list, tuple)) and not isinstance(value, _Object)


def _is_integer(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_id(value):
    return isinstance(value, str) or _is_integer(value)


def _id_text(value):
    return value if isinstance(value, str) else str(int(value))


def _over(count, limit):
    return limit is not None and count > limit


class _Reader:
    def __init__(self, limits):
        self.limits = limits

    def request(self, tree):
        if not _is_object(tree):
            raise _bad("body", "want a JSON object")
        out = Request(user=Entity(), context={}, items=[])
        saw_user = saw_items = False
        for key, value in _members(tree):
            if key == "model":
                if not isinstance(value, str):
                    raise _bad("model", "want a string")
                out.model = value
            elif key == "request_id":
                if not _is_id(value):
                    raise _bad("request_id", "want a string or an integer id")
                out.request_id = _id_text(value)
            elif key == "user":
                if not _is_object(value):
                    raise _bad("user", "want an object with an id")
                saw_user = True
                out.user = self.entity(value, "user", id_required=False)
            elif key == "context":
                if not _is_object(value):
                    raise _bad("context", "want an object of feature values")
                out.context = self.features(value, "context")
            elif key == "items":
                if not _is_array(value):
                    raise _bad("items", "required: a list of items")
                saw_items = True
                out.items = self.items(value)
            else:
                raise _bad(member_field("", key), "unknown field")
        if not saw_user:
            raise _bad("user", "required")
        if not saw_items:
            raise _bad("items", "required: a list of items")
        return out

    def items(self, values):
        items, count = [], 0
        for index, value in enumerate(values):
            count = index + 1
            if _over(count, self.limits.max_items):
                continue  # counted, not read, so the refusal can say how many
            if not _is_object(value):
                raise _bad(f"items[{index}]", "want an object with an id")
            items.append(self.entity(value, f"items[{index}]", id_required=True))
        if _over(count, self.limits.max_items):
            raise _bad("items", f"{count} items; the limit is {self.limits.max_items}")
        if count == 0:
            raise _bad("items", "empty: send at least one item")
        return items

    def entity(self, value, path, id_required):
        entity, saw_id = Entity(), False
        for key, v in _members(value):
            if key == "id":
                saw_id = True
                if not _is_id(v):
                    raise _bad(path + ".id", "want a string or an integer id")
                entity.id = _id_text(v)
            elif key == "features":
                if not _is_object(v):
                    raise _bad(path + ".features", "want an object of feature values")
                entity.features = self.features(v, path + ".features")
            else:
                raise _bad(member_field(path, key), "unknown field")
        if id_required and not saw_id:
            raise _bad(path + ".id", "required")
        return entity

    def features(self, value, path):
        out, limit = {}, self.limits.max_features_per_entity
        for count, (key, v) in enumerate(_members(value), 1):
            if _over(count, limit):
                raise _bad(path, f"more than {limit} features; the limit is {limit}")
            if isinstance(v, bool) or not isinstance(v, (numbers.Real, str, list, tuple)) or _is_object(v):
                raise _bad(member_field(path, key), "want a number, a string or a list of ids")
            if isinstance(v, str):
                out[key] = v
            elif isinstance(v, numbers.Real):
                number = float(v)  # an integer too: the service keeps a double
                if not math.isfinite(number):
                    raise _bad(member_field(path, key), "want a finite number")
                out[key] = number
            else:
                out[key] = self.id_list(v, member_field(path, key))
        return out

    def id_list(self, values, path):
        ids, limit = [], self.limits.max_list_length
        for index, v in enumerate(values):
            if _over(index + 1, limit):
                raise _bad(path, f"list of more than {limit} ids; the limit is {limit}")
            if not _is_id(v):
                raise _bad(f"{path}[{index}]", "want a string or an integer id")
            ids.append(_id_text(v))
        return ids


def parse_request(body, limits=RequestLimits()):
    """A /predict body (bytes, str, or a dict as json.loads would give it)
    as a Request; RequestError where the service answers 400."""
    if isinstance(body, (bytes, bytearray, memoryview, str)):
        tree = parse_json(body)
    else:
        check_json(body)
        tree = body
    return _Reader(limits).request(tree)
