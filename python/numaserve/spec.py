"""model.yaml, read exactly as the service reads it (service/features/model_spec.cpp).

The service parses model.yaml with yaml-cpp and reads every scalar itself:
`version: 01` stays the text "01", `hash_seed: 010` is octal (yaml-cpp reads
whole numbers with the base their prefix says), `.inf` is a number. PyYAML's
usual loaders would resolve those differently, so this module only composes
the YAML into nodes (PyYAML's SafeLoader tells nulls from text the way
yaml-cpp does) and converts scalars with yaml-cpp's rules. Refusals carry
the service's message and field, line numbers included.
"""
import math
import os
import re
import weakref
from dataclasses import dataclass, field as dataclass_field
from typing import Dict, List, Optional, Union

import yaml

from .errors import SpecError

SOURCES = ("user", "context", "item")
KINDS = ("id", "id_list", "numeric")
TRANSFORMS = ("none", "log1p", "standardize")

FeatureValue = Union[float, str, List[str]]

_NULL_TAG = "tag:yaml.org,2002:null"
# What std::istream >> double takes (then trailing whitespace), and
# yaml-cpp's spellings of infinity and NaN.
_DOUBLE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[ \t\n\v\f\r]*")
_INF = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"}
_NEG_INF = {"-.inf", "-.Inf", "-.INF"}
_NAN = {".nan", ".NaN", ".NAN"}
# std::istream >> uint64_t with the base left to the prefix (yaml-cpp unsets
# std::dec): 0x.. hex, 0.. octal, else decimal.
_WHOLE = re.compile(r"\+?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)[ \t\n\v\f\r]*")


class _Node:
    """One YAML node as the service's YamlNode sees it: absent (None), null,
    a scalar, a sequence or a map; `line` is 1-based (0 when absent)."""

    def __init__(self, node):
        self.node = node

    def __bool__(self):
        return self.node is not None

    @property
    def line(self):
        return self.node.start_mark.line + 1 if self.node is not None else 0

    def is_scalar(self):
        return isinstance(self.node, yaml.ScalarNode) and self.node.tag != _NULL_TAG

    def is_sequence(self):
        return isinstance(self.node, yaml.SequenceNode)

    def is_map(self):
        return isinstance(self.node, yaml.MappingNode)

    def size(self):
        return len(self.node.value) if self.is_sequence() or self.is_map() else 0

    def __getitem__(self, key):
        """A map's first value under `key`, a sequence's item; absent if none."""
        if isinstance(key, int):
            return _Node(self.node.value[key] if self.is_sequence() and key < self.size() else None)
        if self.is_map():
            for k, v in self.node.value:
                if _Node(k).text() == key:
                    return _Node(v)
        return _Node(None)

    def entries(self):
        return [(_Node(k), _Node(v)) for k, v in self.node.value] if self.is_map() else []

    def items(self):
        return [_Node(v) for v in self.node.value] if self.is_sequence() else []

    def text(self):
        return self.node.value.translate(_FROM_PRIVATE) if self.is_scalar() else None

    def number(self):
        """yaml-cpp's as<double>(); None when the scalar is not a number."""
        text = self.text()
        if text is None:
            return None
        if _DOUBLE.fullmatch(text):
            value = float(text)
            return None if math.isinf(value) else value  # istream refuses overflow
        if text in _INF:
            return math.inf
        if text in _NEG_INF:
            return -math.inf
        return math.nan if text in _NAN else None

    def whole_number(self):
        """yaml-cpp's as<uint64_t>(); None when not one."""
        text = self.text()
        match = _WHOLE.fullmatch(text) if text is not None else None
        if not match:
            return None
        digits = match.group(1)
        value = int(digits, 16) if digits[:2] in ("0x", "0X") else int(digits, 8) if digits.startswith("0") else int(digits)
        return value if value < 2**64 else None


# PyYAML refuses the surrogates that stand for bytes that are not UTF-8;
# they travel through it as private-use characters of plane 16 instead.
_TO_PRIVATE = {0xDC80 + b: 0x10FF80 + b for b in range(128)}
_FROM_PRIVATE = {v: k for k, v in _TO_PRIVATE.items()}


def _bad(file, node, field, message):
    return SpecError(field, f"{file} line {node.line}: {field}: {message}")


def _key(file, key):
    if key.is_sequence() or key.is_map():
        raise SpecError(file, f"{file} line {key.line}: a key must be a name, not a list or a map")
    return key.text() or ""


def _check_keys(node, file, field, allowed):
    if not node.is_map():
        raise _bad(file, node, field, "want a map")
    for key, _ in node.entries():
        name = _key(file, key)
        if name not in allowed:
            raise _bad(file, key, f"{field}.{name}" if field else name, "unknown key")


def _one_of(node, file, field, names):
    text = node.text()
    if text in names:
        return text
    raise _bad(file, node, field, "want one of " + ", ".join(names))


def _number(node, file, field, infinity_allowed=False):
    """The service's number(): NaN never (it would make every value it
    touches NaN), an infinity only where allowed (an open clip bound)."""
    value = node.number()
    if value is None:
        raise _bad(file, node, field, "want a number")
    if math.isnan(value):
        raise _bad(file, node, field, "want a number, not NaN")
    if math.isinf(value) and not infinity_allowed:
        raise _bad(file, node, field, "want a finite number")
    return value


@dataclass
class FeatureSpec:
    """One entry of model.yaml's features (service/features/model_spec.h)."""

    name: str
    source: str = "item"  # user | context | item
    kind: str = "numeric"  # id | id_list | numeric
    table: str = ""  # id / id_list: the embedding table
    max_len: int = 0  # id_list: longest bag kept (0: no limit)
    transform: str = "none"  # none | log1p | standardize
    mean: float = 0.0
    std: float = 1.0
    clip: Optional[tuple] = None  # (low, high), applied after the transform
    default: FeatureValue = 0.0  # when neither the request nor the store has it
    view: str = ""  # networked stores only
    store_name: str = ""


@dataclass
class EntityMapping:
    view: str
    join_key: str
    int64_key: bool = False


@dataclass
class StoreMapping:
    """model.yaml's feature_store: where a networked (Feast/Redis) store keeps
    the features. Parsed for its refusals; the package reads JSON Lines only."""

    project: str = "numaserve"
    user: EntityMapping = dataclass_field(default_factory=lambda: EntityMapping("user", "user_id"))
    item: EntityMapping = dataclass_field(default_factory=lambda: EntityMapping("item", "item_id"))


_FEATURE_KEYS = {"name", "source", "kind", "table", "max_len", "transform", "mean", "std", "clip", "default",
                 "view", "store_name"}
_ROOT_KEYS = {"name", "version", "hash_seed", "tables", "features", "output", "feature_store", "precision",
              "embedding_precision", "precision_max_drift", "quantized_tables", "priority"}
# In the service's table order: a refusal lists them in this order.
PRECISIONS = ("fp32", "bf16", "bf16-if-available", "int8", "int8-if-available")  # the linear layers
EMBEDDING_PRECISIONS = ("fp32", "bf16", "int8", "int4")  # the tables; int8/int4 rowwise, a scale and bias per row
# embedding_precision when model.yaml leaves it out: the tables follow precision.
EMBEDDING_PRECISION_FOR = {"fp32": "fp32", "bf16": "bf16", "bf16-if-available": "bf16",
                           "int8": "int8", "int8-if-available": "int8"}
DEFAULT_MAX_DRIFT = 5e-3


def _parse_quantized_tables(node, file, spec):
    if not node.is_sequence():
        raise _bad(file, node, "quantized_tables", "want a list of table names")
    for i, item in enumerate(node.items()):
        field = f"quantized_tables[{i}]"
        table = (item.text() or "") if item.is_scalar() else ""
        if table not in spec.tables:
            raise _bad(file, item, field, f"'{table}' is not among tables")
        if table in spec.quantized_tables:
            raise _bad(file, item, field, f"'{table}' is listed twice")
        spec.quantized_tables.append(table)
    # The files' codes are embedding_precision's: written, and 8- or 4-bit.
    if spec.quantized_tables and not (spec.embedding_precision_explicit and spec.embedding_precision in ("int8", "int4")):
        raise _bad(file, node, "quantized_tables", "needs embedding_precision int8 or int4 (the shipped files' codes)")


def _parse_numeric(node, file, field, f):
    if node["table"]:
        raise _bad(file, node["table"], field + ".table", "numeric features have no table")
    if node["transform"]:
        f.transform = _one_of(node["transform"], file, field + ".transform", TRANSFORMS)
    if node["mean"]:
        f.mean = _number(node["mean"], file, field + ".mean")
    if node["std"]:
        f.std = _number(node["std"], file, field + ".std")
    if f.transform == "standardize" and not f.std > 0:
        raise _bad(file, node, field + ".std", "standardize needs std > 0")
    clip = node["clip"]
    if clip:
        if not clip.is_sequence() or clip.size() != 2:
            raise _bad(file, clip, field + ".clip", "want [low, high]")
        low = _number(clip[0], file, field + ".clip", infinity_allowed=True)
        high = _number(clip[1], file, field + ".clip", infinity_allowed=True)
        if low > high:
            raise _bad(file, clip, field + ".clip", "low is above high")
        f.clip = (low, high)


def _parse_sparse(node, tables, file, field, f):
    table = node["table"].text()
    if table is None or table not in tables:
        raise _bad(file, node["table"] or node, field + ".table", "want one of the model's tables")
    f.table = table
    if node["max_len"]:
        if f.kind != "id_list":
            raise _bad(file, node["max_len"], field + ".max_len", "only id_list features have one")
        n = node["max_len"].number()
        # The service's test, n == (unsigned)n, holds for whole numbers in [1, 2^32).
        if n is None or not n >= 1 or not (n < 2**32 and n == int(n)):
            raise _bad(file, node["max_len"], field + ".max_len", "want a whole number >= 1")
        f.max_len = int(n)
    f.default = "" if f.kind == "id" else []


def _parse_default(node, kind, file, field):
    if kind == "numeric":
        return _number(node, file, field)
    if kind == "id" and node.is_scalar():
        return node.text()
    if kind == "id_list" and node.is_sequence():
        ids = []
        for item in node.items():
            if item.text() is None:
                raise _bad(file, item, field, "want a list of ids")
            ids.append(item.text())
        return ids
    raise _bad(file, node, field, "want an id" if kind == "id" else "want a list of ids")


def _parse_feature(node, tables, file, field):
    _check_keys(node, file, field, _FEATURE_KEYS)
    if not node["name"].is_scalar() or not node["name"].text():
        raise _bad(file, node, field + ".name", "required")
    f = FeatureSpec(name=node["name"].text())
    for key in ("view", "store_name"):
        if node[key]:
            if not node[key].is_scalar() or not node[key].text():
                raise _bad(file, node[key], f"{field}.{key}", "want a name")
            setattr(f, key, node[key].text())
    f.source = _one_of(node["source"] or node, file, field + ".source", SOURCES)
    f.kind = _one_of(node["kind"] or node, file, field + ".kind", KINDS)
    if f.kind == "numeric":
        _parse_numeric(node, file, field, f)
    else:
        _parse_sparse(node, tables, file, field, f)
    if node["default"]:
        f.default = _parse_default(node["default"], f.kind, file, field + ".default")
    return f


def _name_at(node, file, field, fallback):
    if not node:
        return fallback
    if not node.is_scalar() or not node.text():
        raise _bad(file, node, field, "want a name")
    return node.text()


def _parse_store_mapping(node, file):
    store = StoreMapping()
    _check_keys(node, file, "feature_store", {"project", "user", "item"})
    store.project = _name_at(node["project"], file, "feature_store.project", store.project)
    for key in ("user", "item"):
        if not node[key]:
            continue
        entity, field = getattr(store, key), "feature_store." + key
        _check_keys(node[key], file, field, {"view", "join_key", "join_key_type"})
        view = _name_at(node[key]["view"], file, field + ".view", entity.view)
        join_key = _name_at(node[key]["join_key"], file, field + ".join_key", entity.join_key)
        entity.view, entity.join_key = view, join_key
        if node[key]["join_key_type"]:
            entity.int64_key = _one_of(node[key]["join_key_type"], file, field + ".join_key_type",
                                       ("string", "int64")) == "int64"
    return store


def _compose(text, file):
    """The first YAML document's root node (yaml-cpp's Load reads no further)."""
    try:
        documents = yaml.compose_all(text.translate(_TO_PRIVATE), Loader=yaml.SafeLoader)
        return _Node(next(documents, None))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 0
        raise SpecError(file, f"{file} line {line}: {e.problem or e}") from None
    except yaml.YAMLError as e:
        raise SpecError(file, f"{file}: {e}") from None


class ModelSpec:
    """A model's feature contract: which features it reads, from where, and
    how each becomes model input. Build it with ModelSpec.load(model_dir)
    (or ModelSpec.parse(text, file)); extract() turns requests into the
    model's inputs, exactly as the service does."""

    def __init__(self, name, version, hash_seed, tables, features, store, text, file):
        self.name: str = name
        self.version: str = version
        self.hash_seed: int = hash_seed
        self.tables: Dict[str, int] = tables  # name -> rows
        self.features: List[FeatureSpec] = features  # model input order
        self.store: StoreMapping = store
        self.text = text  # model.yaml as read: what export() writes beside model.pt
        self.file = file
        self.dense_features = [f for f in features if f.kind == "numeric"]
        self.sparse_features = [f for f in features if f.kind != "numeric"]
        self._by_key = {(f.name, f.source): f for f in features}
        self._checked_stores = weakref.WeakSet()  # stores check_store() passed
        # How the service runs the forward; the training side's check
        # (numaserve.drift) compares a bf16 or int8 run with fp32 as its load
        # does. precision: the linear layers (one of PRECISIONS);
        # embedding_precision: the tables' storage (one of
        # EMBEDDING_PRECISIONS), always resolved: when model.yaml leaves it
        # out it follows precision (EMBEDDING_PRECISION_FOR), and
        # embedding_precision_explicit says whether model.yaml wrote it.
        self.precision: str = "fp32"
        self.embedding_precision: str = "fp32"
        self.embedding_precision_explicit: bool = False
        # quantized_tables: the tables shipped already rowwise in
        # embedding_precision (int8 or int4), as tables/<name>.rowwise beside
        # model.pt (numaserve.export writes them).
        self.quantized_tables: List[str] = []
        self.precision_max_drift: float = DEFAULT_MAX_DRIFT
        # priority: the server's priority level for a request that names
        # none (1 the highest); 0 leaves it to `serve --default-priority`.
        # A serving choice: extraction does not read it.
        self.priority: int = 0

    @classmethod
    def load(cls, model_dir):
        """Reads model_dir/model.yaml; refuses (SpecError) what the service refuses."""
        file = os.path.join(os.fspath(model_dir), "model.yaml")
        with open(file, "rb") as f:
            # yaml-cpp passes bytes that are not UTF-8 through into scalars
            # (a default id in Latin-1 hashes as its Latin-1 bytes): so do we.
            return cls.parse(f.read().decode("utf-8", "surrogateescape"), file)

    @classmethod
    def parse(cls, text, file="model.yaml"):
        """model.yaml's text; `file` names it in refusals."""
        root = _compose(text, file)
        if not root.is_map():
            raise SpecError(file, f"{file}: want a map")
        for key, _ in root.entries():
            name = _key(file, key)
            if name not in _ROOT_KEYS:
                raise _bad(file, key, name, "unknown key")
        name_version = []
        for key in ("name", "version"):
            # Read as text: a version like 01 or 1.10 must not become a number.
            if not root[key].is_scalar() or not root[key].text():
                raise _bad(file, root, key, "required")
            name_version.append(root[key].text())
        seed = 0
        if root["hash_seed"]:
            seed = root["hash_seed"].whole_number()
            if seed is None:
                raise _bad(file, root["hash_seed"], "hash_seed", "want a whole number")
        tables = {}
        if root["tables"] and not root["tables"].is_map():
            raise _bad(file, root["tables"], "tables", "want a map of name: rows")
        for key, value in root["tables"].entries():
            table = _key(file, key)
            rows = value.whole_number() or 0
            if rows == 0:
                raise _bad(file, value, "tables." + table, "want rows >= 1")
            tables[table] = rows
        features_node = root["features"]
        if not features_node.is_sequence() or features_node.size() == 0:
            raise _bad(file, features_node or root, "features", "want a non-empty list")
        features, seen = [], set()
        for i, node in enumerate(features_node.items()):
            field = f"features[{i}]"
            f = _parse_feature(node, tables, file, field)
            if (f.name, f.source) in seen:
                raise _bad(file, node, field + ".name", f"'{f.name}' is declared twice for source {f.source}")
            seen.add((f.name, f.source))
            features.append(f)
        store = _parse_store_mapping(root["feature_store"], file) if root["feature_store"] else StoreMapping()
        spec = cls(name_version[0], name_version[1], seed, tables, features, store, text, file)
        if root["precision"]:
            spec.precision = _one_of(root["precision"], file, "precision", PRECISIONS)
        if root["embedding_precision"]:
            spec.embedding_precision = _one_of(root["embedding_precision"], file, "embedding_precision",
                                               EMBEDDING_PRECISIONS)
            spec.embedding_precision_explicit = True
        else:
            spec.embedding_precision = EMBEDDING_PRECISION_FOR[spec.precision]
        if root["precision_max_drift"]:
            spec.precision_max_drift = _number(root["precision_max_drift"], file, "precision_max_drift")
            if spec.precision_max_drift <= 0:
                raise _bad(file, root["precision_max_drift"], "precision_max_drift", "want a number > 0")
        if root["quantized_tables"]:
            _parse_quantized_tables(root["quantized_tables"], file, spec)
        if root["priority"]:
            spec.priority = root["priority"].whole_number()
            if not spec.priority:
                raise _bad(file, root["priority"], "priority", "want a priority level: a whole number, 1 the highest")
        return spec

    def feature(self, name, source) -> Optional[FeatureSpec]:
        return self._by_key.get((name, source))

    @property
    def dense_width(self):
        return len(self.dense_features)

    def __repr__(self):
        return f"ModelSpec({self.name!r}, version {self.version!r}, {len(self.features)} features)"

    # extract(), extract_rows() and check_store() are added by numaserve.extract.
