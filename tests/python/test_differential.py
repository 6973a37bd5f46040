"""The Python package's extraction against the service's own, bit for bit.

Every input below goes both to numaserve.ModelSpec.extract (python/) and to
`numaserve extract` (the service's code path: parse_predict_request, the
embedded store's fetch with its item cache, features::extract), and the two
must agree exactly: dense float32 bit patterns, int64 indices and offsets,
and refusals (status, field, message -- the message may differ only where
it is the JSON parser's own wording of a syntax error, "body: not valid
JSON: ..."; Python's json module does not tell simdjson's kinds of syntax
error apart). model.yaml and store.jsonl refusals are compared by the
service's start-up message.

Inputs: hand-written cases over tests/fixtures/features (every refusal kind,
ids as integers, strings and floats, unicode, lists past max_len, inline,
stored and missing features, limits, duplicate keys, JSON corner cases);
random requests over the demo models and their store; model.yaml variants
exercising every transform, clip and default; and the predict_body fuzz
corpora with seeded mutations of them. One `numaserve extract` process per
model directory and store, all inputs on its stdin.

Needs NUMASERVE_BINARY (the built service); without it the test fails.
"""
import concurrent.futures
import json
import os
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import numaserve  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "features"
FUZZ_DIRS = [ROOT / "tests" / "fuzz" / "corpus" / "predict_body", ROOT / "tests" / "fuzz" / "regressions" / "predict_body"]
FUZZ_MUTATIONS = 2700  # besides the corpora's own ~350 bodies: ~3000 fuzz inputs per model
SYNTAX = "body: not valid JSON"
SOURCES = ("user", "context", "item")
WORKERS = max(2, min(8, os.cpu_count() or 2))  # service processes side by side


def binary():
    path = os.environ.get("NUMASERVE_BINARY")
    if not path:
        pytest.fail("NUMASERVE_BINARY is not set: point it at the built service (build/service/numaserve); "
                    "this test compares against it and does not skip")
    if not os.access(path, os.X_OK):
        pytest.fail(f"NUMASERVE_BINARY={path}: not an executable")
    return path


def service(model_dir, store, lines):
    """`numaserve extract` over `lines` (bytes, no newline inside): one reply per line,
    or (exit status, stderr) when it refuses to start."""
    args = [binary(), "extract", "--model-dir", str(model_dir)] + (["--feature-store", str(store)] if store else [])
    # The last line without its newline (the CLI allows it) unless it is empty.
    text = b"\n".join(lines) + (b"\n" if lines and not lines[-1] else b"")
    done = subprocess.run(args, input=text, capture_output=True, timeout=120)
    if done.returncode != 0:
        return done.returncode, done.stderr.decode(errors="replace").strip()
    replies = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert len(replies) == len(lines), f"{model_dir}: {len(lines)} lines in, {len(replies)} out"
    return replies


def package(spec, store, line):
    """The package's answer to one line, in the CLI's shape (dense as float32)."""
    try:
        dense, indices, offsets = spec.extract(line, store)
    except numaserve.RequestError as e:
        return {"status": e.status, **e.to_json()}
    return {"rows": dense.shape[0], "dense_width": dense.shape[1], "dense": dense.numpy().reshape(-1),
            "bags": [{"indices": i.tolist(), "offsets": o.tolist()} for i, o in zip(indices, offsets)]}


def difference(want, got):
    """None when equal; else what differs. `want` is the service's reply."""
    if "status" in want or "status" in got:
        if (want.get("status"), want.get("field")) != (got.get("status"), got.get("field")):
            return f"service {want}, package {got if 'status' in got else 'extracted it'}"
        if want["error"] != got["error"] and not (want["error"].startswith(SYNTAX) and got["error"].startswith(SYNTAX)):
            return f"message: service {want['error']!r}, package {got['error']!r}"
        return None
    if (want["rows"], want["dense_width"]) != (got["rows"], got["dense_width"]):
        return f"shape: service {want['rows']}x{want['dense_width']}, package {got['rows']}x{got['dense_width']}"
    # The service prints a non-finite float as null (nlohmann's JSON).
    finite = np.array([v is not None for v in want["dense"]], dtype=bool)
    ours = got["dense"]
    if not np.array_equal(finite, np.isfinite(ours)):
        return f"dense finiteness: service {want['dense']}, package {ours.tolist()}"
    theirs = np.array([v if v is not None else 0.0 for v in want["dense"]], dtype=np.float64).astype(np.float32)
    if not np.array_equal(theirs[finite].view(np.uint32), ours[finite].view(np.uint32)):
        return f"dense bits: service {theirs.tolist()}, package {ours.tolist()}"
    if want["bags"] != got["bags"]:
        return f"bags: service {want['bags']}, package {got['bags']}"
    return None


STATS = {"extracted": 0, "refused": 0, "syntax errors worded differently": 0}


def compare(spec, store, replies, lines):
    failures = []
    for line, want in zip(lines, replies):
        got = package(spec, store, line)
        diff = difference(want, got)
        if diff:
            failures.append(f"{line[:300]!r}\n    {diff}")
        STATS["refused" if "status" in want else "extracted"] += 1
        STATS["syntax errors worded differently"] += "status" in want and want["error"] != got.get("error")
    return failures


def check_all(runs):
    """runs: (label, model_dir, store_path, lines). Service processes run
    side by side; every failure of every run is reported together."""
    failures, counts = [], {}
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        futures = [(label, d, s, lines, pool.submit(service, d, s, lines)) for label, d, s, lines in runs]
        for label, model_dir, store_path, lines, future in futures:
            replies = future.result()
            if isinstance(replies, tuple):
                failures.append(f"[{label}] the service did not start: {replies}")
                continue
            spec = numaserve.ModelSpec.load(model_dir)
            store = numaserve.FeatureStore.from_jsonl(store_path) if store_path else None
            failures += [f"[{label}] {f}" for f in compare(spec, store, replies, lines)]
            counts[label] = len(lines)
    assert not failures, f"{len(failures)} differences:\n" + "\n".join(failures[:25])
    return counts


def body(user=None, items=None, context=None, **root):
    out = dict(root)
    if user is not None:
        out["user"] = user
    if context is not None:
        out["context"] = context
    if items is not None:
        out["items"] = items
    return json.dumps(out, ensure_ascii=False).encode()


# --- the fixture model: hand-written cases --------------------------------

def fixture_cases():
    u, i1 = {"id": "u1"}, [{"id": "i1"}]
    lines = [
        body({"id": "u1"}, [{"id": "i1"}, {"id": "i2"}, {"id": "i3"}, {"id": "nobody"}], {"hour": 7}),
        body({"id": 2}, i1), body({"id": "2"}, i1), body({"id": 2.0}, i1), body({"id": "nobody"}, i1), body({}, i1),
        body({"id": ""}, [{"id": ""}]), body({"id": -0}, [{"id": 0}]),
        body({"id": 18446744073709551615}, [{"id": -9223372036854775808}]),
        body({"id": "üser 😀"}, [{"id": "ítem"}, {"id": "\u0000x"}, {"id": "\u2028"}]), body({"id": "x" * 5000}, i1),
        # Inline features override the store's; ids as numbers.
        body({"id": "u1", "features": {"age": 55, "country": "de"}}, [{"id": "i1", "features": {"price": 0.5, "tags": []}}]),
        body({"id": "u1", "features": {"country": 42}}, i1), body({"id": "u1", "features": {"country": 42.0}}, i1),
        body({"id": "u1", "features": {"country": 42.5}}, i1), body({"id": "u1", "features": {"country": -0.0}}, i1),
        body({"id": "u1", "features": {"country": 1e19}}, i1), body({"id": "u1", "features": {"country": -1e300}}, i1),
        body({"id": "u1", "features": {"country": 9007199254740993}}, i1),
        body({"id": "u1", "features": {"country": 18446744073709551615}}, i1),
        body({"id": "u1", "features": {"country": ["fr"]}}, i1),
        body(u, [{"id": "i1", "features": {"tags": [1, 2, "3", 18446744073709551615, -5]}}]),
        body(u, [{"id": "i1", "features": {"tags": ["a", "b", "c", "d", "e", "f"]}}]),
        body(u, [{"id": "i1", "features": {"tags": "a"}}]), body(u, [{"id": "i1", "features": {"tags": 5}}]),
        body(u, [{"id": "i1", "features": {"tags": [1.5]}}]), body(u, [{"id": "i1", "features": {"tags": [["a"]]}}]),
        body(u, [{"id": "i1", "features": {"tags": [None]}}]), body(u, [{"id": "i1", "features": {"id": "other"}}]),
        body(u, [{"id": "i1", "features": {"id": 7}}]), body(u, [{"id": "i1", "features": {"id": 7.25}}]),
        # Numbers through the transforms: log1p's domain, clip's edges, standardize.
        *[body({"id": "u1", "features": {"age": a}}, [{"id": "i1", "features": {"price": p}}], {"hour": h})
          for a, p, h in [(0, 0, 0), (40, -0.0, -0.0), (1e308, 1e300, 1e308), (-1e308, -0.999999, 3.4e38),
                          (0.1, 147.4131591025766, 3.5e38), (1e-320, 5e-324, -1e-45), (40.000001, 1e-17, 0.1),
                          (12345678901234567890, 148.4131591025766, 18446744073709551615)]],
        body(u, [{"id": "i1", "features": {"price": -1}}]), body(u, [{"id": "i1", "features": {"price": -2.5}}]),
        body(u, [{"id": "i1", "features": {"price": "9"}}]), body(u, [{"id": "i1", "features": {"price": [9]}}]),
        body(u, [{"id": "i1"}], {"hour": "noon"}), body(u, [{"id": "i1"}], {"hour": []}),
        body({"id": "u1", "features": {"age": "old"}}, i1), body({"id": "u1", "features": {"age": True}}, i1),
        body(u, i1, {"hour": None}), body(u, i1, {"hour": {}}),
        # Unknown features: the first by name is named.
        body({"id": "u1", "features": {"zzz": 1, "bbb": 2}}, i1), body(u, i1, {"price": 1}),
        body(u, [{"id": "i1"}, {"id": "i2", "features": {"hour": 1}}]), body({"id": "u1", "features": {"tags": []}}, i1),
        body({"id": "u1", "features": {"é": 1, "e": 2}}, i1),
        # The schema: every refusal of predict_json.cpp.
        body(None, i1), body(u, None), body(u, []), body("u1", i1), body(u, "i1"), body(u, [5]), body(u, [{}]),
        body(u, [{"id": None}]), body(u, [{"id": ["i1"]}]), body(u, [{"id": True}]), body(u, [{"features": {}}]),
        body(u, [{"id": "i1", "features": []}]), body(u, [{"id": "i1", "extra": 1}]), body({"id": "u1", "x": 1}, i1),
        body({"id": "u1", "features": None}, i1), body(u, i1, []), body(u, i1, "ctx"),
        body(u, i1, model="tiny_ranker"), body(u, i1, model="ranker_a"), body(u, i1, model=5), body(u, i1, model=""),
        body(u, i1, request_id="r1"), body(u, i1, request_id=7), body(u, i1, request_id=7.5),
        body(u, i1, request_id=None), body(u, i1, extra=1), body(u, i1, **{"": 1}), body(u, i1, **{"a.b": 1}),
        body(u, i1, **{'q"': 1}), body(u, i1, **{"x[0]": 1}), body(u, i1, **{"\n": 1}),
        body({"id": "u1", "features": {"": 1}}, i1), body({"id": "u1", "features": {"a.b": {}}}, i1),
        body({"id": "u1", "features": {"a[": [1, {}]}}, i1), body({"id": "u1", "features": {"\u00e9\"": None}}, i1),
        # Limits (service/api/config.h).
        body(u, [{"id": "i1"}] * 2000), body(u, [{"id": "i1"}] * 2001), body(u, [{"id": "i1"}] * 2000 + [5, [], {}]),
        body(u, [5] * 2001), body(u, [{"id": "i1", "features": {f"f{k}": 1 for k in range(257)}}]),
        body({"id": "u1", "features": {f"f{k}": 1 for k in range(256)}}, i1),
        body(u, [{"id": "i1", "features": {"tags": ["t"] * 1024}}]), body(u, [{"id": "i1", "features": {"tags": ["t"] * 1025}}]),
        body(u, [{"id": "i1", "features": {"tags": ["t"] * 1024 + [1.5]}}]),
        # Duplicate keys: the last value wins (and every one counts toward the limits).
        b'{"user": {"id": "u1"}, "user": {"id": "u2"}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "u1", "id": 2}, "items": [{"id": "i1"}], "items": [{"id": "i2"}, {"id": "i3"}]}',
        b'{"user": {"id": "u1"}, "items": [{"id": "i1"}], "items": []}',
        b'{"user": {"id": "u1"}, "items": [{"id": "i1", "features": {"price": 1, "price": "x"}}]}',
        b'{"user": {"id": "u1"}, "items": [{"id": "i1", "features": {"price": "x", "price": 2}}]}',
        b'{"user": {"id": "u1", "features": {"age": 1}, "features": {}}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "u1"}, "context": {"hour": 1}, "context": {"hour": 2}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "u1"}, "items": [{"id": "i1", "features": {"tags": ["a"], "tags": ["b", "c"]}}]}',
        b'{"user": {"id": "u1", "features": {' + b",".join([b'"age": 1'] * 257) + b'}}, "items": [{"id": "i1"}]}',
        b'{"model": 1, "model": "tiny_ranker", "user": {"id": "u1"}, "items": [{"id": "i1"}]}',
        # JSON itself: what simdjson refuses, with the field "body".
        b"", b"   ", b"\t\r", b"{", b"[]", b"5", b'"x"', b"null", b"{}", b"{} {}", b'{"user": {}}x',
        b'\xef\xbb\xbf{"user": {"id": "u1"}, "items": [{"id": "i1"}]}', b'{"user": {"id": "u1"}, "items": [{"id": "i1"}]}\r',
        b'{"user": {"id": NaN}, "items": []}', b'{"user": {"id": "u1", "features": {"age": Infinity}}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "u1", "features": {"age": -Infinity}}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "u1", "features": {"age": 1e400}}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "u1", "features": {"age": -1e400}}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "u1", "features": {"age": 1e-400}}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": 18446744073709551616}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": -9223372036854775809}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "u1", "features": {"age": 1' + b"0" * 400 + b'}}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "u1", "features": {"age": 0.' + b"0" * 400 + b'1}}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "u1", "features": {"age": 01}}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "u1", "features": {"age": 1.}}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "u1", "features": {"age": -}}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "\\ud800"}, "items": [{"id": "i1"}]}', b'{"user": {"id": "\\udc00x"}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "\\ud83d\\ude00"}, "items": [{"id": "\\u00e9\\u0000"}]}',
        b'{"user": {"id": "\\x"}, "items": [{"id": "i1"}]}', b'{"user": {"id": "a\tb"}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "\xff"}, "items": [{"id": "i1"}]}', b'{"user": {"id": "\xed\xa0\x80"}, "items": [{"id": "i1"}]}',
        b'{"user": {"id": "\xc0\xaf"}, "items": [{"id": "i1"}]}', b'{"user": {"id": "u1"}, "items": [{"id": "i1"}]\x00}',
        b'{"user": {"id": "u1"}, "items": [' + b"[" * 1022 + b"]" * 1022 + b"]}",
        b'{"user": {"id": "u1"}, "items": [' + b"[" * 1023 + b"]" * 1023 + b"]}",
        b"[" * 1024 + b"]" * 1024, b"[" * 1025 + b"]" * 1025, b"[" * 5000 + b"]" * 5000,
        b'{"user": {"id": "u1"}, "items": [{"id": "i1"}], "items": [' + b"{}," * 2001 + b"{}]}",
    ]
    spec = numaserve.ModelSpec.load(FIXTURES)
    return lines + random_requests(random.Random(29), 600, ["u1", 2, "2", "nobody", ""], ["i1", "i2", "i3", "zz"], spec)


# Odd values, drawn now and then instead of one of the feature's kind.
ODD_VALUES = [True, None, {}, [1.5], [["a"]], "", "a", 2.5, -0.0, 1e19, 18446744073709551615, -9223372036854775808,
              9007199254740993, [], list("abcdefghijklmnopqrstuvwxyz")]
IDS = ["a", "fr", "42", "é", "😀", "\u0000", "x y", "i1", "u1", "t1", "shoes", "red", 0, 7, -3, 42.0, -0.0, 1e15,
       18446744073709551615]


def random_number(rng):
    r = rng.random()
    if r < 0.3:
        return rng.randint(-5, 2000)
    if r < 0.6:
        return rng.uniform(-1, 20)
    if r < 0.9:
        return rng.choice([-1, 1]) * 10 ** rng.uniform(-320, 308)
    return rng.choice([0, -0.0, -1, -0.9999999999, 1e-300, 5e-324, 3.4028234663852886e38, 3.4028235677973366e38,
                       1.7976931348623157e308, -1.7976931348623157e308, 0.1, 1 / 3])


def random_value(rng, kind):
    if rng.random() < 0.04:
        return rng.choice(ODD_VALUES)
    if kind == "numeric":
        return random_number(rng)
    if kind == "id":
        return rng.choice(IDS)
    return [rng.choice(IDS[:-5] + [rng.randint(0, 10**6)]) for _ in range(rng.choice([0, 1, 2, 3, 5, 9, 25]))]


def random_requests(rng, count, users, items, spec):
    """Requests over `spec`'s features: stored, unknown and empty ids, inline
    values of every kind (now and then of the wrong type, or a feature the
    model does not have), integer and float ids, unicode."""
    kinds = {source: [(f.name, f.kind) for f in spec.features if f.source == source] for source in SOURCES}
    lines = []
    for _ in range(count):
        def inline(source):
            chosen = rng.sample(kinds[source], rng.randint(0, len(kinds[source])))
            out = {name: random_value(rng, kind) for name, kind in chosen}
            if rng.random() < 0.02:
                out["nope"] = 1
            return out

        def entity_id(pool):
            r = rng.random()
            return rng.choice(pool) if r < 0.85 else rng.choice([7, 0, "ü", "", 18446744073709551615]) if r < 0.993 \
                else rng.choice([12.0, None, ["x"]])

        user = {"id": entity_id(users)} if rng.random() < 0.97 else {}
        if rng.random() < 0.4:
            user["features"] = inline("user")
        items_out = []
        for _ in range(rng.choice([1, 1, 2, 3, 5, 20])):
            item = {"id": entity_id(items)}
            if rng.random() < 0.3:
                item["features"] = inline("item")
            items_out.append(item)
        context = inline("context") if rng.random() < 0.6 else None
        root = {"request_id": "r"} if rng.random() < 0.2 else {}
        if rng.random() < 0.1:
            root["model"] = spec.name if rng.random() < 0.8 else "other"
        lines.append(body(user, items_out, context, **root))
    return lines


# --- fuzz corpora and their mutations -------------------------------------

TOKENS = [b'"', b"{", b"}", b"[", b"]", b",", b":", b"null", b"true", b"1e400", b"-0", b"1.5", b'"\\ud800"', b"NaN",
          b"18446744073709551616", b"\xff", b"\x00", b" ", b'"id"', b'"features"', b'"items"', b'"user"', b"[1]",
          b'{"id": 1}', b'"\\u00e9"', b"9007199254740993", b'"price"', b'"tags"', b'"hour"', b"-1", b'""']
JSON_SWAPS = ["x", 1, -1, 2.5, -0.0, 1e308, None, True, [], {}, ["t1"], [1, 2], {"id": "i1"}, "\u00e9", 18446744073709551615]


def fuzz_corpus():
    bodies = []
    for d in FUZZ_DIRS:
        for path in sorted(d.iterdir()):
            bodies += [line for line in path.read_bytes().split(b"\n")]
    return bodies


def mutate_json(rng, tree):
    """A random member or element of a parsed body replaced, duplicated or removed."""
    def containers(v, out):
        if isinstance(v, (dict, list)):
            out.append(v)
            for child in (v.values() if isinstance(v, dict) else v):
                containers(child, out)
        return out

    spots = containers(tree, [])
    if not spots:
        return json.dumps(rng.choice(JSON_SWAPS)).encode()
    spot = rng.choice(spots)
    if isinstance(spot, dict):
        keys = list(spot) + ["id", "features", "price", "tags", "hour", "age", "country", "zz"]
        key, action = rng.choice(keys), rng.random()
        if action < 0.7:
            spot[key] = rng.choice(JSON_SWAPS)
        elif key in spot:
            del spot[key]
    elif spot and rng.random() < 0.5:
        spot[rng.randrange(len(spot))] = rng.choice(JSON_SWAPS)
    else:
        spot.append(rng.choice(JSON_SWAPS))
    return json.dumps(tree, ensure_ascii=rng.random() < 0.5).encode()


def mutate_bytes(rng, data, corpus):
    data = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        r, at = rng.random(), rng.randint(0, len(data))
        if r < 0.3:
            data[at:at] = rng.choice(TOKENS)
        elif r < 0.5 and data:
            del data[at:at + rng.randint(1, 8)]
        elif r < 0.7 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif r < 0.85:
            other = rng.choice(corpus)
            data[at:] = other[rng.randint(0, len(other)):]
        elif data:
            data[at:at] = data[max(0, at - 16):at]
    return bytes(data)


def fuzz_inputs():
    """The corpora's bodies, then seeded mutations: most of a body that
    parses (1-3 members changed: these get past the JSON syntax), the rest
    of the raw bytes of any body."""
    rng, corpus = random.Random(2029), fuzz_corpus()
    parsed = []
    for seed in corpus:
        try:
            parsed.append(json.loads(seed))
        except (ValueError, RecursionError):
            pass
    out = list(corpus)
    for _ in range(FUZZ_MUTATIONS):
        if rng.random() < 0.7:
            tree = json.loads(json.dumps(rng.choice(parsed)))
            for _ in range(rng.randint(1, 3)):
                mutated = mutate_json(rng, tree)
                tree = json.loads(mutated)
        else:
            mutated = mutate_bytes(rng, rng.choice(corpus), corpus)
        out.append(mutated)
    return [line.replace(b"\n", b" ") for line in out]


# --- model.yaml variants: every transform, clip and default -----------------

VARIANTS = {
    "transforms": """name: transforms
version: 1.10
hash_seed: 0x1F
tables: {t: 97}
features:
  - {name: plain, source: item, kind: numeric}
  - {name: plain_default, source: item, kind: numeric, default: -3.25}
  - {name: log, source: item, kind: numeric, transform: log1p}
  - {name: log_clip, source: item, kind: numeric, transform: log1p, clip: [0.5, 2.5], default: 1e-3}
  - {name: std, source: item, kind: numeric, transform: standardize, mean: 3.3, std: 0.7}
  - {name: std_clip, source: user, kind: numeric, transform: standardize, mean: -1e3, std: 1e-3, clip: [-1e9, 1e9], default: 7}
  - {name: clip_only, source: context, kind: numeric, clip: [-1, 1], default: 1e300}
  - {name: unused_mean, source: context, kind: numeric, transform: none, mean: 100, std: 5, default: 0.1}
  - {name: none_inf_clip, source: user, kind: numeric, clip: [-.inf, .inf]}
  - {name: wide, source: item, kind: numeric, transform: standardize, mean: -1.7e308, std: 1e-10}
  - {name: id, source: item, kind: numeric}
  - {name: tag, source: item, kind: id, table: t}
  - {name: edge, source: item, kind: numeric, transform: standardize, mean: +.5, std: 2., clip: [-1e-400, .Inf], default: 1E2}
  - {name: quoted, source: user, kind: numeric, transform: standardize, mean: "1e-3", std: '3', default: "7"}
""",
    "ids": """name: ids
version: "2"
hash_seed: 18446744073709551615
tables: {one: 1, huge: 18446744073709551615, odd: 010, h: 0x10}
features:
  - {name: id, source: user, kind: id, table: huge}
  - {name: id, source: item, kind: id, table: odd, default: "fallback"}
  - {name: id, source: context, kind: id, table: h, default: 42}
  - {name: mono, source: item, kind: id, table: one}
  - {name: list1, source: item, kind: id_list, table: huge, max_len: 1}
  - {name: list_default, source: user, kind: id_list, table: odd, default: [a, 1, "x y", ""]}
  - {name: list_free, source: context, kind: id_list, table: h}
  - {name: empty_default, source: item, kind: id, table: huge, default: ""}
  - {name: latin1, source: context, kind: id_list, table: huge, default: ["caf\udce9", "\udcff", "x\udce2\udc82y"]}
  - {name: num, source: context, kind: numeric, default: 1e300}
""",
    # Without a store: the service extracts each stored item at start, and
    # these defaults would refuse every one (see test_load_refusals_...).
    "bad_default": """name: bad_default
version: "3"
tables: {t: 5}
features:
  - {name: a, source: item, kind: numeric, transform: log1p, default: -1}
  - {name: b, source: user, kind: id, table: t, default: 7}
  - {name: c, source: context, kind: numeric, transform: log1p, default: -2}
""",
}
STORELESS = {"bad_default"}
VARIANT_STORE = [
    {"kind": "user", "id": "u1", "features": {"std_clip": 5, "none_inf_clip": 1e308, "list_default": ["q", 5]}},
    {"kind": "user", "id": 9, "features": {"id": "not the id", "std_clip": -3}},
    {"kind": "item", "id": "i1", "features": {"id": -4, "plain": 1, "log": 0.25, "std": 1e-5, "tag": "t", "mono": "m", "list1": ["a", "b"]}},
    {"kind": "item", "id": 5, "features": {"id": 12.0, "wide": 1e308, "empty_default": 18}},
]


def variant_requests(rng, model_dir):
    spec = numaserve.ModelSpec.load(model_dir)
    return random_requests(rng, 250, ["u1", 9, "9", "nobody", ""], ["i1", 5, "5", "x", ""], spec)


def write_variant(tmp, name, text):
    d = tmp / name
    d.mkdir()
    (d / "model.yaml").write_bytes(text.encode("utf-8", "surrogateescape"))  # \udcff: the byte 0xff
    return d


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    subprocess.run([binary(), "make-demo-models", str(d)], check=True, capture_output=True, timeout=120)
    return d


def demo_requests(rng, model_dir, store_path, count):
    users, items = [], []
    for line in store_path.read_text().splitlines():
        e = json.loads(line)
        (users if e["kind"] == "user" else items).append(e["id"])
    spec = numaserve.ModelSpec.load(model_dir)
    return random_requests(rng, count, rng.sample(users, 50) + ["nobody"], rng.sample(items, 200) + ["nothing"], spec)


def test_extraction_matches_the_service(demo, tmp_path):
    variants = {name: write_variant(tmp_path, name, text) for name, text in VARIANTS.items()}
    variant_store = tmp_path / "variant_store.jsonl"
    variant_store.write_text("".join(json.dumps(e) + "\n" for e in VARIANT_STORE))
    rng, fuzz = random.Random(7), fuzz_inputs()
    runs = [
        ("fixture", FIXTURES, FIXTURES / "store.jsonl", fixture_cases() + fuzz),
        ("fixture, no store", FIXTURES, None, fixture_cases()[:150]),
        ("ranker_a", demo / "ranker_a", demo / "store.jsonl", demo_requests(rng, demo / "ranker_a", demo / "store.jsonl", 400) + fuzz),
        ("ranker_b", demo / "ranker_b", demo / "store.jsonl", demo_requests(rng, demo / "ranker_b", demo / "store.jsonl", 200)),
    ] + [(name, d, None if name in STORELESS else variant_store, variant_requests(rng, d)) for name, d in variants.items()]
    counts = check_all(runs)
    print("inputs compared:", counts, "total", sum(counts.values()), STATS)


# --- model.yaml and store.jsonl: the service's start-up refusals -----------

GOOD = FIXTURES.joinpath("model.yaml").read_text()
FEATURE = "  - {name: x, source: item, kind: numeric}\n"
BAD_MODELS = {
    "not_a_map": "- a\n", "empty": "", "syntax": "name: [\n", "unknown_root": GOOD + "extra: 1\n",
    "no_name": GOOD.replace("name: tiny_ranker", "name: ~"), "no_version": GOOD.replace('version: "01"\n', ""),
    "seed": GOOD.replace("hash_seed: 7", "hash_seed: -1"), "seed_float": GOOD.replace("hash_seed: 7", "hash_seed: 1.5"),
    "seed_octal_bad": GOOD.replace("hash_seed: 7", "hash_seed: 08"),
    "tables_list": "name: a\nversion: b\ntables: [1]\nfeatures: [{name: x, source: item, kind: numeric}]\n",
    "rows_zero": GOOD.replace("tag: 64", "tag: 0"), "rows_text": GOOD.replace("tag: 64", "tag: 1e3"),
    "no_features": "name: a\nversion: b\nfeatures: []\n",
    "feature_scalar": GOOD + "  - 5\n", "feature_key": GOOD + "  - {name: x, source: item, kind: numeric, bins: 3}\n",
    "feature_name": GOOD + "  - {name: '', source: item, kind: numeric}\n",
    "source": GOOD + "  - {name: x, source: session, kind: numeric}\n", "kind": GOOD + "  - {name: x, source: item}\n",
    "numeric_table": GOOD + "  - {name: x, source: item, kind: numeric, table: tag}\n",
    "transform": GOOD + "  - {name: x, source: item, kind: numeric, transform: log}\n",
    "mean": GOOD + "  - {name: x, source: item, kind: numeric, mean: big}\n",
    "std_nan": GOOD + "  - {name: x, source: item, kind: numeric, transform: standardize, std: .nan}\n",
    "max_len_nan": GOOD + "  - {name: x, source: item, kind: id_list, table: tag, max_len: .nan}\n",
    "not_utf8": GOOD + "# \udcff\n",
    "std_zero": GOOD + "  - {name: x, source: item, kind: numeric, transform: standardize, std: 0}\n",
    "clip_one": GOOD + "  - {name: x, source: item, kind: numeric, clip: [1]}\n",
    "clip_text": GOOD + "  - {name: x, source: item, kind: numeric, clip: [a, b]}\n",
    "clip_order": GOOD + "  - {name: x, source: item, kind: numeric, clip: [2, 1]}\n",
    "clip_nan": GOOD + "  - {name: x, source: item, kind: numeric, clip: [.nan, 1]}\n",
    "clip_nan_high": GOOD + "  - {name: x, source: item, kind: numeric, clip: [0, .NAN]}\n",
    "mean_inf": GOOD + "  - {name: x, source: item, kind: numeric, mean: -.inf}\n",
    "std_inf": GOOD + "  - {name: x, source: item, kind: numeric, transform: standardize, std: .inf}\n",
    "default_nan": GOOD + "  - {name: x, source: item, kind: numeric, default: .nan}\n",
    "default_inf": GOOD + "  - {name: x, source: item, kind: numeric, default: .Inf}\n",
    "no_table": GOOD + "  - {name: x, source: item, kind: id}\n",
    "unknown_table": GOOD + "  - {name: x, source: item, kind: id_list, table: brand}\n",
    "max_len_id": GOOD + "  - {name: x, source: item, kind: id, table: tag, max_len: 2}\n",
    "max_len_zero": GOOD + "  - {name: x, source: item, kind: id_list, table: tag, max_len: 0}\n",
    "max_len_big": GOOD + "  - {name: x, source: item, kind: id_list, table: tag, max_len: 4294967296}\n",
    "default_id_list": GOOD + "  - {name: x, source: item, kind: id, table: tag, default: [a]}\n",
    "default_list_map": GOOD + "  - {name: x, source: item, kind: id_list, table: tag, default: [a, {b: c}]}\n",
    "default_number": GOOD + "  - {name: x, source: item, kind: numeric, default: lots}\n",
    "twice": GOOD + "  - {name: price, source: item, kind: numeric}\n",
    "view": GOOD + "  - {name: x, source: item, kind: numeric, view: ''}\n",
    "store_key": GOOD + "feature_store: {projects: a}\n",
    "join_key_type": GOOD + "feature_store: {user: {join_key_type: int32}}\n",
    "list_key": GOOD + "? [a]\n: b\n",
    "tabs": GOOD.replace("  - {name: hour", "\t- {name: hour"),
    "precision": GOOD + "precision: fp16\n", "precision_list": GOOD + "precision: [bf16]\n",
    "max_drift_zero": GOOD + "precision_max_drift: 0\n", "max_drift_nan": GOOD + "precision_max_drift: .nan\n",
    "max_drift_text": GOOD + "precision_max_drift: small\n",
    "precision_int4": GOOD + "precision: int4\n",
    "embedding_precision": GOOD + "embedding_precision: fp16\n",
    "embedding_precision_if": GOOD + "precision: int8\nembedding_precision: int8-if-available\n",
    "embedding_precision_list": GOOD + "embedding_precision: [int8]\n",
    "embedding_precision_null": GOOD + "embedding_precision: ~\n",
    "embedding_precision_key": GOOD + "embedding_precisions: int8\n",
    "both_precisions_bad": GOOD + "embedding_precision: int3\nprecision: int3\n",  # precision is read first
    "quantized_map": GOOD + "embedding_precision: int8\nquantized_tables: {tag: 1}\n",
    "quantized_unknown": GOOD + "embedding_precision: int8\nquantized_tables: [brand]\n",
    "quantized_nested": GOOD + "embedding_precision: int8\nquantized_tables: [[tag]]\n",
    "quantized_twice": GOOD + "embedding_precision: int4\nquantized_tables: [tag, tag]\n",
    "quantized_no_precision": GOOD + "quantized_tables: [tag]\n",
    "quantized_following": GOOD + "precision: int8\nquantized_tables: [tag]\n",  # the files' bits must be written
    "quantized_bf16": GOOD + "embedding_precision: bf16\nquantized_tables: [tag]\n",
    "priority_zero": GOOD + "priority: 0\n", "priority_text": GOOD + "priority: high\n",
    "priority_negative": GOOD + "priority: -2\n",
    # Accepted (the service starts and extracts as the package does):
    "precision_int8": GOOD + "precision: int8\n", "precision_int8_if": GOOD + "precision: int8-if-available\n",
    "embedding_int4": GOOD + "precision: bf16-if-available\nembedding_precision: int4\n",
    "embedding_int8": GOOD + "embedding_precision: int8\n", "priority": GOOD + "priority: 2\n",
    "embedding_bf16_int8": GOOD + "precision: int8\nembedding_precision: bf16\n",
    "quantized_none": GOOD + "embedding_precision: int8\nquantized_tables: []\n",
}
GOOD_STORE = FIXTURES.joinpath("store.jsonl").read_text()
BAD_STORES = {
    "not_json": GOOD_STORE + "{\n", "array": "[1]\n", "kind": '{"kind": "users", "id": "u"}\n',
    "id_float": '{"kind": "user", "id": 1.5}\n', "id_missing": '{"kind": "item"}\n',
    "features_list": '{"kind": "item", "id": "i", "features": []}\n',
    "feature_bool": '{"kind": "item", "id": "i", "features": {"z": true, "b": null}}\n',
    "feature_list_float": '{"kind": "item", "id": "i", "features": {"tags": [1.5]}}\n',
    "twice": GOOD_STORE + '{"kind": "user", "id": "2"}\n', "nan": '{"kind": "item", "id": "i", "features": {"price": NaN}}\n',
    "overflow": '{"kind": "item", "id": "i", "features": {"price": 1e400}}\n',
    "unreadable_item": GOOD_STORE + '{"kind": "item", "id": "i9", "features": {"price": "cheap"}}\n',
    "unreadable_list": '{"kind": "item", "id": "i9", "features": {"tags": "red"}}\n',
    # Accepted, and read as the service reads them:
    "bom_crlf": '\ufeff{"kind": "item", "id": 5, "features": {"price": 3, "tags": [1, "x", 18446744073709551615]}}\r\n',
    "nul_after": '{"kind": "item", "id": "i1", "features": {"price": 2}}\u0000 trailing\n',
    "big_int": '{"kind": "item", "id": "i1", "features": {"price": 18446744073709551616, "tags": ["a"], "tags": ["b"]}}\n',
}


def start_refusals(tmp_path):
    """(label, model_dir, store) whose service start must match the package's load."""
    out = []
    for name, text in BAD_MODELS.items():
        out.append((name, write_variant(tmp_path, "m_" + name, text), None))
    # The service extracts every stored item at start: a default that fails fails there.
    out.append(("defaults at start", write_variant(tmp_path, "m_defaults", VARIANTS["bad_default"]), FIXTURES / "store.jsonl"))
    out.append(("no items, bad defaults", tmp_path / "m_defaults", _users_only(tmp_path)))
    for name, text in BAD_STORES.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(text.encode())
        out.append(("store " + name, FIXTURES, path))
    return out


def _users_only(tmp_path):
    path = tmp_path / "users_only.jsonl"
    path.write_text('{"kind": "user", "id": "u1", "features": {"b": "x"}}\n')
    return path


def package_start(model_dir, store):
    """The package's load of what the service loads at start: its refusal message, or None."""
    try:
        spec = numaserve.ModelSpec.load(model_dir)
        if store:
            spec.check_store(numaserve.FeatureStore.from_jsonl(store))
    except numaserve.NumaserveError as e:
        return e.message
    return None


def test_load_refusals_match_the_service(tmp_path):
    request = body({"id": 2}, [{"id": "i1"}, {"id": 5}, {"id": "i9"}])
    failures = []
    cases = start_refusals(tmp_path)
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(lambda c: service(c[1], c[2], [request]), cases))
    for (label, model_dir, store), got in zip(cases, results):
        ours = package_start(model_dir, store)
        if isinstance(got, list):  # the service started
            if ours is not None:
                failures.append(f"{label}: the service loads it, the package refuses: {ours}")
                continue
            spec = numaserve.ModelSpec.load(model_dir)
            store_obj = numaserve.FeatureStore.from_jsonl(store) if store else None
            failures += [f"{label}: {f}" for f in compare(spec, store_obj, got, [request])]
            continue
        status, stderr = got
        want = stderr.removeprefix("numaserve: ")
        if ours is None:
            failures.append(f"{label}: the service refuses ({want}), the package loads it")
        elif label in ("syntax", "tabs"):
            # YAML syntax: yaml-cpp's and PyYAML's wording differ; both name the file.
            if not ours.startswith(str(model_dir)) or not want.startswith(str(model_dir)):
                failures.append(f"{label}: service {want!r}, package {ours!r}")
        elif ours != want:
            failures.append(f"{label}: service {want!r}, package {ours!r}")
    assert not failures, "\n".join(failures)
