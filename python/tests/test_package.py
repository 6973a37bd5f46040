"""The package's own tests: no service binary needed (the differential test,
tests/python/test_differential.py, compares it with the service)."""
import ctypes
import json
import math
import pathlib
import random
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import numaserve  # noqa: E402
from numaserve import RequestError, SpecError, StoreError  # noqa: E402
import numaserve.spec as spec_module  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "features"


@pytest.fixture(scope="module")
def spec():
    return numaserve.ModelSpec.load(FIXTURES)


@pytest.fixture(scope="module")
def store():
    return numaserve.FeatureStore.from_jsonl(FIXTURES / "store.jsonl")


def row(spec, text, table):
    return numaserve.bucket(text, spec.hash_seed, spec.tables[table])


def refusal(call):
    with pytest.raises(RequestError) as e:
        call()
    return e.value.status, e.value.field, e.value.message


# --- the hash contract and the fixture model, as service/features' tests have them

def test_xxh64_test_vectors():
    assert numaserve.bucket("", 0, 2**64 - 1) == 0xEF46DB3751D8E999 - 2**64  # int64, as the service casts
    assert numaserve.bucket("a", 0, 2**64 - 1) == 0xD24EC4F1A98C6E5B - 2**64
    assert numaserve.bucket("abc", 0, 1000) == 0x44BC2CF5AD770999 % 1000


def test_fixture_model_reads_as_the_service_does(spec):
    assert (spec.name, spec.version, spec.hash_seed) == ("tiny_ranker", "01", 7)
    assert [f.name for f in spec.dense_features] == ["age", "price", "hour"]
    assert [(f.name, f.source) for f in spec.sparse_features] == [("id", "user"), ("country", "user"), ("id", "item"),
                                                                   ("tags", "item")]


def test_dense_columns_and_bags_from_the_store(spec, store):
    dense, indices, offsets = spec.extract({"user": {"id": "u1"}, "items": [{"id": "i1"}, {"id": "i2"}, {"id": "i3"}]}, store)
    assert dense.dtype == torch.float32 and dense.shape == (3, 3)
    assert dense[:, 0].tolist() == [-1.0] * 3  # age (30 - 40) / 10, shared
    assert dense[:, 1].tolist() == [torch.tensor(math.log1p(9.0)).item(), 5.0, 0.0]  # log1p, clipped at 5, default
    assert dense[:, 2].tolist() == [12.0] * 3  # hour's default
    assert all(t.dtype == torch.int64 for t in indices + offsets)
    assert indices[0].tolist() == [row(spec, "u1", "user")] * 3
    assert indices[1].tolist() == [row(spec, "fr", "country")] * 3
    assert indices[2].tolist() == [row(spec, i, "item") for i in ("i1", "i2", "i3")]
    assert offsets[3].tolist() == [0, 2, 5]  # 2 tags, 3 of 5 (max_len), none
    assert indices[3][0].item() == row(spec, "shoes", "tag")


def test_integer_ids_defaults_and_the_entity_id(spec, store):
    dense, indices, _ = spec.extract({"user": {"id": 2}, "items": [{"id": "nobody-knows"}]}, store)
    assert indices[0].item() == row(spec, "2", "user")  # stored under the integer id 2
    assert dense[0, 0].item() == 1.5  # its age 55
    assert indices[1].item() == row(spec, "unknown", "country")  # the default
    assert indices[2].item() == row(spec, "nobody-knows", "item")  # the id itself
    _, a, _ = spec.extract({"user": {"id": "u1", "features": {"country": 42}}, "items": [{"id": "i1"}]})
    _, b, _ = spec.extract({"user": {"id": "u1", "features": {"country": "42"}}, "items": [{"id": "i1"}]})
    assert a[1].item() == b[1].item() == row(spec, "42", "country")


def test_inline_features_override_the_store(spec, store):
    dense, indices, offsets = spec.extract(
        {"user": {"id": "u1", "features": {"age": 50}}, "context": {"hour": 3},
         "items": [{"id": "i2", "features": {"tags": [1, "x"], "price": 0}}]}, store)
    assert dense.tolist() == [[1.0, 0.0, 3.0]]
    assert indices[3].tolist() == [row(spec, "1", "tag"), row(spec, "x", "tag")]


def test_refusals_name_the_services_field(spec, store):
    one = [{"id": "i1"}]
    cases = {
        "{": "body", "[]": "body", '{"user": {"id": NaN}, "items": []}': "body",
        '{"user": {"id": 1e400}, "items": []}': "body", '{"user": {"id": "\\ud800"}, "items": []}': "body",
        json.dumps({"items": one}): "user", json.dumps({"user": {}}): "items",
        json.dumps({"user": {}, "items": []}): "items", json.dumps({"user": {"id": 1.5}, "items": one}): "user.id",
        json.dumps({"user": {}, "items": [{}]}): "items[0].id", json.dumps({"user": {}, "items": one, "x.y": 1}): '["x.y"]',
        json.dumps({"user": {"features": {"zz": 1, "aa": 1}}, "items": one}): "user.features.aa",
        json.dumps({"user": {}, "items": [{"id": "i1", "features": {"price": "x"}}]}): "items[0].features.price",
        json.dumps({"user": {}, "items": [{"id": "i1", "features": {"tags": [1.5]}}]}): "items[0].features.tags[0]",
        json.dumps({"user": {}, "items": [{"id": "i1", "features": {"price": True}}]}): "items[0].features.price",
        json.dumps({"user": {}, "items": [{"id": "i1", "features": {"price": -1}}]}): "items[0].features.price",
        json.dumps({"user": {"id": "2"}, "context": {"hour": []}, "items": one}): "context.hour",
    }
    for body, field in cases.items():
        status, got, message = refusal(lambda: spec.extract(body, store))
        assert (status, got) == (400, field), (body, message)
        assert message.startswith(field + ": ") or field == '["x.y"]', message
    assert refusal(lambda: spec.extract({"model": "other", "user": {}, "items": one}))[:2] == (404, "model")
    _, _, message = refusal(lambda: spec.extract({"user": {}, "items": [{"id": "i1", "features": {"price": -2}}]}))
    assert message == "items[0].features.price: log1p needs a value above -1, got -2.000000"


def test_a_dict_reads_as_its_json_text(spec, store):
    rng = random.Random(3)
    values = [1, 2.5, -0.0, "x", [], ["a", 2], None, True, {}, 1e19, 2**64, float("nan")]
    for _ in range(200):
        body = {"user": {"id": rng.choice(["u1", 2, "", 2.5])},
                "items": [{"id": "i1", "features": {rng.choice(["price", "tags", "id"]): rng.choice(values)}}],
                "context": {"hour": rng.choice(values)}}
        try:
            want = spec.extract(json.dumps(body), store)
        except RequestError as e:
            assert refusal(lambda: spec.extract(body, store)) == (e.status, e.field, e.message)
            continue
        got = spec.extract(body, store)
        assert torch.equal(got[0], want[0]) and all(torch.equal(a, b) for a, b in zip(got[1] + got[2], want[1] + want[2]))


def test_limits_and_duplicate_keys(spec):
    many = {"user": {}, "items": [{"id": "i"}] * 2001}
    assert refusal(lambda: spec.extract(many)) == (400, "items", "items: 2001 items; the limit is 2000")
    assert spec.extract_rows(items=many["items"])[0].shape[0] == 2001  # training rows: no limits
    dup = '{"user": {"id": "u1"}, "items": [{"id": "i1", "features": {"price": "x", "price": 0}}]}'
    assert spec.extract(dup)[0][0, 1].item() == 0.0  # the last value wins
    keys = ",".join(['"age": 1'] * 257)
    body = '{"user": {"features": {%s}}, "items": [{"id": "i"}]}' % keys
    assert refusal(lambda: spec.extract(body))[1] == "user.features"  # each duplicate counts


def test_log1p_is_the_c_librarys():
    libm = ctypes.CDLL("libm.so.6")
    libm.log1p.restype, libm.log1p.argtypes = ctypes.c_double, [ctypes.c_double]
    rng = random.Random(1)
    for x in [rng.uniform(-0.99, 100) for _ in range(2000)] + [0.0, -0.0, 1e-300, 5e-324, 1e300]:
        assert math.log1p(x).hex() == libm.log1p(x).hex(), x


# --- model.yaml ------------------------------------------------------------

def parse(text):
    return numaserve.ModelSpec.parse(text, "m/model.yaml")


def test_scalars_are_read_as_yaml_cpp_reads_them():
    s = parse("name: 7\nversion: 1.10\nhash_seed: 010\ntables: {t: 0x10}\n"
              "features: [{name: x, source: item, kind: id_list, table: t, max_len: 2.0, default: [1, b]}]\n")
    assert (s.name, s.version, s.hash_seed, s.tables) == ("7", "1.10", 8, {"t": 16})
    assert s.features[0].max_len == 2 and s.features[0].default == ["1", "b"]


@pytest.mark.parametrize("text, field, message", [
    ("- a\n", "m/model.yaml", "m/model.yaml: want a map"),
    ("name: a\nversion: b\nfeatures: []\n", "features", "m/model.yaml line 3: features: want a non-empty list"),
    ("name: a\nversion: b\nhash_seed: -1\nfeatures: [{name: x}]\n", "hash_seed", "m/model.yaml line 3: hash_seed: want a whole number"),
    ("name: a\nversion: b\nfeatures:\n  - {name: x, source: item, kind: nope}\n", "features[0].kind",
     "m/model.yaml line 4: features[0].kind: want one of id, id_list, numeric"),
    ("name: a\nversion: b\nfeatures:\n  - {name: x, source: item, kind: numeric, clip: [2, 1]}\n", "features[0].clip",
     "m/model.yaml line 4: features[0].clip: low is above high"),
    ("name: a\nversion: b\ntables: {t: 1}\nfeatures:\n  - {name: x, source: item, kind: id, table: u}\n",
     "features[0].table", "m/model.yaml line 5: features[0].table: want one of the model's tables"),
    ("name: a\nversion: b\nfeatures:\n  - {name: x, source: user, kind: numeric}\n  - {name: x, source: user, kind: numeric}\n",
     "features[1].name", "m/model.yaml line 5: features[1].name: 'x' is declared twice for source user"),
    ("name: [\n", "m/model.yaml", None),
])
def test_model_yaml_refusals(text, field, message):
    with pytest.raises(SpecError) as e:
        parse(text)
    assert e.value.field == field
    assert e.value.message == message if message else e.value.message.startswith("m/model.yaml line ")


# --- model.yaml: precision and embedding_precision --------------------------

PRECISION_BASE = "name: a\nversion: b\nfeatures: [{name: x, source: item, kind: numeric}]\n"


def test_precision_defaults_to_fp32_tables_and_layers():
    s = parse(PRECISION_BASE)
    assert (s.precision, s.embedding_precision, s.embedding_precision_explicit) == ("fp32", "fp32", False)


@pytest.mark.parametrize("precision, tables", [
    ("fp32", "fp32"), ("bf16", "bf16"), ("bf16-if-available", "bf16"), ("int8", "int8"), ("int8-if-available", "int8"),
])
def test_embedding_precision_follows_precision_when_left_out(precision, tables):
    s = parse(PRECISION_BASE + f"precision: {precision}\n")
    assert (s.precision, s.embedding_precision, s.embedding_precision_explicit) == (precision, tables, False)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "bf16-if-available", "int8", "int8-if-available"])
@pytest.mark.parametrize("tables", ["fp32", "bf16", "int8", "int4"])
def test_embedding_precision_written_is_kept_with_any_precision(precision, tables):
    for text in (f"precision: {precision}\nembedding_precision: {tables}\n",
                 f"embedding_precision: {tables}\nprecision: {precision}\n"):  # either order
        s = parse(PRECISION_BASE + text)
        assert (s.precision, s.embedding_precision, s.embedding_precision_explicit) == (precision, tables, True)


def test_embedding_precision_without_precision():
    s = parse(PRECISION_BASE + "embedding_precision: int4\n")
    assert (s.precision, s.embedding_precision, s.embedding_precision_explicit) == ("fp32", "int4", True)


def test_precision_names_in_the_services_order():
    assert spec_module.PRECISIONS == ("fp32", "bf16", "bf16-if-available", "int8", "int8-if-available")
    assert spec_module.EMBEDDING_PRECISIONS == ("fp32", "bf16", "int8", "int4")
    assert set(spec_module.EMBEDDING_PRECISION_FOR) == set(spec_module.PRECISIONS)
    assert set(spec_module.EMBEDDING_PRECISION_FOR.values()) <= set(spec_module.EMBEDDING_PRECISIONS)


PRECISION_WANT = "want one of fp32, bf16, bf16-if-available, int8, int8-if-available"
EMBEDDING_WANT = "want one of fp32, bf16, int8, int4"


@pytest.mark.parametrize("text, field, message", [
    ("precision: fp16\n", "precision", f"m/model.yaml line 4: precision: {PRECISION_WANT}"),
    ("precision: int4\n", "precision", f"m/model.yaml line 4: precision: {PRECISION_WANT}"),
    ("precision: INT8\n", "precision", f"m/model.yaml line 4: precision: {PRECISION_WANT}"),
    ("precision: [int8]\n", "precision", f"m/model.yaml line 4: precision: {PRECISION_WANT}"),
    ("embedding_precision: fp16\n", "embedding_precision", f"m/model.yaml line 4: embedding_precision: {EMBEDDING_WANT}"),
    ("precision: int8\n\nembedding_precision: int8-if-available\n", "embedding_precision",
     f"m/model.yaml line 6: embedding_precision: {EMBEDDING_WANT}"),
    ("embedding_precision: bf16-if-available\n", "embedding_precision",
     f"m/model.yaml line 4: embedding_precision: {EMBEDDING_WANT}"),
    ("embedding_precision: ~\n", "embedding_precision", f"m/model.yaml line 4: embedding_precision: {EMBEDDING_WANT}"),
    ("embedding_precision: {int: 4}\n", "embedding_precision",
     f"m/model.yaml line 4: embedding_precision: {EMBEDDING_WANT}"),
    ("embedding_precisions: int8\n", "embedding_precisions", "m/model.yaml line 4: embedding_precisions: unknown key"),
    # precision is read (and refused) before embedding_precision, as the service does.
    ("embedding_precision: int3\nprecision: int3\n", "precision", f"m/model.yaml line 5: precision: {PRECISION_WANT}"),
])
def test_precision_refusals_name_the_field_and_line(text, field, message):
    with pytest.raises(SpecError) as e:
        parse(PRECISION_BASE + text)
    assert (e.value.field, e.value.message) == (field, message)


# --- the store -------------------------------------------------------------

@pytest.mark.parametrize("line, field, message", [
    ("{", "s.jsonl", "s.jsonl line 1: not a JSON object"),
    ('{"kind": "x", "id": 1}', "kind", 's.jsonl line 1: kind must be "user" or "item"'),
    ('{"kind": "item", "id": 1.0}', "id", "s.jsonl line 1: id must be a string or an integer"),
    ('{"kind": "item", "id": "i", "features": {"b": null, "a": true}}', "a",
     "s.jsonl line 1: feature 'a' must be a number, a string or a list of ids"),
    ('{"kind": "item", "id": "i", "features": {"a": NaN}}', "s.jsonl", "s.jsonl line 1: not a JSON object"),
])
def test_store_refusals(line, field, message):
    with pytest.raises(StoreError) as e:
        numaserve.FeatureStore.parse(line, "s.jsonl")
    assert (e.value.field, e.value.message) == (field, message)


def test_store_values_as_the_service_keeps_them(spec):
    store = numaserve.FeatureStore.parse('\n{"kind": "item", "id": 5, "features": {"price": 3, "tags": [1, "x"]}}\r\n\n')
    assert store.item("5") == {"price": 3.0, "tags": ["1", "x"]}
    with pytest.raises(StoreError, match="appears twice"):
        numaserve.FeatureStore.parse('{"kind": "user", "id": 2}\n{"kind": "user", "id": "2"}')
    bad = numaserve.FeatureStore.parse('{"kind": "item", "id": "i9", "features": {"price": "cheap"}}')
    with pytest.raises(StoreError) as e:
        spec.check_store(bad)
    assert e.value.message == "model tiny_ranker: feature store item 'i9' price: want a number, got a string"


# --- batches for training --------------------------------------------------

def test_collate_is_extraction_of_the_joined_rows(spec, store):
    items = [[{"id": "i1"}], [{"id": "i2"}, {"id": "x", "features": {"tags": ["q"]}}], [{"id": "i3"}]]
    parts = [spec.extract_rows({"id": "u1"}, {"hour": 1}, group, store) for group in items]
    joined = numaserve.collate(parts)
    whole = spec.extract_rows({"id": "u1"}, {"hour": 1}, sum(items, []), store)
    assert torch.equal(joined[0], whole[0])
    assert all(torch.equal(a, b) for a, b in zip(joined[1] + joined[2], whole[1] + whole[2]))


def test_request_dataset_with_a_data_loader(spec, store, tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"user": {"id": "u1"}, "items": [{"id": "i1"}, {"id": "i2"}], "labels": [1, 0]}) + "\n"
                    + json.dumps({"user": {"id": 2}, "items": [{"id": "i3"}], "labels": [1]}) + "\n")
    data = numaserve.RequestDataset(path, spec, store)
    (dense, indices, offsets), labels = next(iter(torch.utils.data.DataLoader(data, batch_size=2,
                                                                                collate_fn=numaserve.collate)))
    assert dense.shape == (3, 3) and labels.tolist() == [1.0, 0.0, 1.0] and offsets[0].tolist() == [0, 1, 2]


# --- export ----------------------------------------------------------------

class Ranker(torch.nn.Module):
    def __init__(self, spec, dim=4, rows=None, width=1, nan=False):
        super().__init__()
        self.emb_user = torch.nn.Parameter(torch.randn(rows or spec.tables["user"], dim))
        self.emb_country = torch.nn.Parameter(torch.randn(spec.tables["country"], dim))
        self.emb_item = torch.nn.EmbeddingBag(spec.tables["item"], dim, mode="mean")
        self.emb_tag = torch.nn.EmbeddingBag(spec.tables["tag"], dim, mode="mean")
        self.top = torch.nn.Linear(3 + 4 * dim, width)
        self.nan = nan

    def forward(self, dense: torch.Tensor, indices: list[torch.Tensor], offsets: list[torch.Tensor]) -> torch.Tensor:
        parts = [dense,
                 torch.nn.functional.embedding_bag(indices[0], self.emb_user, offsets[0]),
                 torch.nn.functional.embedding_bag(indices[1], self.emb_country, offsets[1]),
                 self.emb_item(indices[2], offsets[2]), self.emb_tag(indices[3], offsets[3])]
        out = torch.sigmoid(self.top(torch.cat(parts, 1))).flatten(1)
        return out * float("nan") if self.nan else out


def test_export_writes_a_checked_model_directory_atomically(spec, store, tmp_path):
    torch.manual_seed(0)
    module = Ranker(spec)
    out = numaserve.export(module, spec, tmp_path / "ranker")
    assert sorted(p.name for p in out.iterdir()) == ["model.pt", "model.yaml"]
    assert [p.name for p in tmp_path.iterdir()] == ["ranker"]  # no temporary left behind
    loaded = torch.jit.load(str(out / "model.pt"))
    batch = numaserve.ModelSpec.load(out).extract({"user": {"id": "u1"}, "items": [{"id": "i1"}, {"id": "i2"}]}, store)
    with torch.no_grad():
        assert torch.equal(loaded(*batch), module(*batch))
    with pytest.raises(FileExistsError):
        numaserve.export(module, spec, out)
    assert numaserve.export(module, spec, out, overwrite=True) == out
    assert [p.name for p in tmp_path.iterdir()] == ["ranker"]


class WrongSignature(torch.nn.Module):
    def forward(self, dense: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        return dense.sum(1)


@pytest.mark.parametrize("make, field", [
    (lambda spec: WrongSignature(), "forward"),
    (lambda spec: Ranker(spec, rows=10), "tables.user"),
    (lambda spec: Ranker(spec, width=2), "output"),
    (lambda spec: Ranker(spec, nan=True), "output"),
])
def test_export_refuses_what_the_service_would(spec, tmp_path, make, field):
    with pytest.raises(numaserve.ExportError) as e:
        numaserve.export(make(spec), spec, tmp_path / "m")
    assert e.value.field == field, e.value.message
    assert list(tmp_path.iterdir()) == []


# --- installing ------------------------------------------------------------

def test_installs_offline_beside_debians_packages(tmp_path):
    """pip install of the package with no index: setuptools, wheel and the
    dependencies come from the system (--no-build-isolation; pip's isolated
    build would fetch setuptools from an index)."""
    import shutil
    import subprocess

    source = tmp_path / "src"
    shutil.copytree(ROOT / "python", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-index", "--no-build-isolation", str(source)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    check = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import numaserve, sys; print(numaserve.__file__); "
                            f"numaserve.ModelSpec.load({str(FIXTURES)!r})"],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert check.returncode == 0 and str(venv) in check.stdout, check.stdout + check.stderr
