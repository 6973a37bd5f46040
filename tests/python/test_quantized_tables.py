"""Tables shipped already quantized (model.yaml quantized_tables): the
package's export writes tables/<name>.rowwise and a model.pt holding
placeholders; the built service (NUMASERVE_BINARY) serves them exactly as the
same tables converted at its own load, and refuses a broken file naming it."""

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import numaserve  # noqa: E402

SMALL_DEMO = ["--embedding-mb", "4", "--users", "20", "--items", "40"]


def binary() -> str:
    path = os.environ.get("NUMASERVE_BINARY")
    assert path, "set NUMASERVE_BINARY to the numaserve binary"
    return path


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("demo")
    subprocess.run([binary(), "make-demo-models", str(d)] + SMALL_DEMO, check=True, capture_output=True, timeout=120)
    return d


def yaml_with(demo: Path, lines: str) -> str:
    text = (demo / "ranker_a" / "model.yaml").read_text()
    kept = [line for line in text.splitlines() if not line.startswith(("precision", "embedding_precision"))]
    return "\n".join(kept) + "\n" + lines


def converted_at_load(demo: Path, out: Path, lines: str) -> Path:
    out.mkdir(parents=True)
    shutil.copy(demo / "ranker_a" / "model.pt", out / "model.pt")
    (out / "model.yaml").write_text(yaml_with(demo, lines))
    return out


def shipped(demo: Path, out: Path, lines: str) -> Path:
    spec = numaserve.ModelSpec.parse(yaml_with(demo, lines), "model.yaml")
    return numaserve.export(torch.jit.load(str(demo / "ranker_a" / "model.pt")), spec, out)


def scores(model_dir: Path, demo: Path):
    store = demo / "store.jsonl"
    entries = [json.loads(line) for line in store.read_text().splitlines()]
    users = [e["id"] for e in entries if e["kind"] == "user"][:6]
    items = [{"id": e["id"]} for e in entries if e["kind"] == "item"]
    with numaserve.LocalServer(str(model_dir), feature_store=str(store), binary=binary()) as server:
        return [server.predict({"user": {"id": u}, "items": items})["scores"] for u in users]


def check(model_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([binary(), "check-model", str(model_dir)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("bits", ["int8", "int4"])
def test_shipped_tables_serve_as_the_same_tables_converted_at_load(demo, tmp_path, bits):
    tables = list(numaserve.ModelSpec.load(demo / "ranker_a").tables)
    # int4's rounding is past the default drift bound: the load converting them checks it, the shipped load has nothing to check.
    lines = f"embedding_precision: {bits}\nprecision_max_drift: 1\n"
    module = torch.jit.load(str(demo / "ranker_a" / "model.pt"))
    before = {name: p.clone() for name, p in module.named_parameters()}
    spec = numaserve.ModelSpec.parse(yaml_with(demo, lines + f"quantized_tables: [{', '.join(tables)}]\n"), "model.yaml")
    ship = numaserve.export(module, spec, tmp_path / "shipped")
    assert all(torch.equal(p, before[name]) for name, p in module.named_parameters()), "export changed the module"
    assert sorted(p.name for p in (ship / "tables").iterdir()) == sorted(f"{t}.rowwise" for t in tables)
    # model.pt holds placeholders: a fraction of the fp32 file.
    assert (ship / "model.pt").stat().st_size < (demo / "ranker_a" / "model.pt").stat().st_size / 4

    converted = converted_at_load(demo, tmp_path / "converted", lines)
    assert scores(ship, demo) == scores(converted, demo)  # bit for bit: the package quantizes as the service does

    report = check(ship)
    assert report.returncode == 0, report.stderr
    assert f"precision: linear layers fp32, tables {bits}" in report.stdout
    assert f"-> {bits} rowwise, shipped in tables/user.rowwise" in report.stdout
    # Shipped tables stay as shipped whatever the tables' precision asked: nothing is left to narrow.
    as_shipped = subprocess.run([binary(), "check-model", str(ship), "--embedding-precision", "fp32"], capture_output=True,
                                text=True, timeout=120)
    assert f"tables {bits} as shipped (quantized_tables); nothing narrowed at load" in as_shipped.stdout, as_shipped.stderr


def test_tables_not_listed_follow_embedding_precision(demo, tmp_path):
    ship = shipped(demo, tmp_path / "m", "embedding_precision: int8\nquantized_tables: [user]\n")
    report = check(ship)
    assert report.returncode == 0, report.stderr
    lines = {table: next(line for line in report.stdout.splitlines() if f"%self.emb_{table} (" in line) for table in ("user", "item")}
    assert lines["user"].endswith("-> int8 rowwise, shipped in tables/user.rowwise")
    assert lines["item"].endswith("-> int8 rowwise")  # converted at load
    assert "scores within" in report.stdout  # the tables converted at load were checked for drift


def corrupt_magic(d: Path):
    data = bytearray((d / "tables" / "user.rowwise").read_bytes())
    data[0:8] = b"NOTROWS!"
    (d / "tables" / "user.rowwise").write_bytes(bytes(data))


def truncate(d: Path):
    path = d / "tables" / "user.rowwise"
    path.write_bytes(path.read_bytes()[:-1])


def other_table(d: Path):
    shutil.copy(d / "tables" / "country.rowwise", d / "tables" / "user.rowwise")


def nan_scale(d: Path):
    path = d / "tables" / "user.rowwise"
    data = bytearray(path.read_bytes())
    _, _, _, dim = struct.unpack("<IIQQ", data[8:32])
    row_bytes = dim + 4
    data[32 + 3 * row_bytes + dim:32 + 3 * row_bytes + dim + 2] = struct.pack("<H", 0x7E00)  # row 3's scale: NaN
    path.write_bytes(bytes(data))


def missing(d: Path):
    (d / "tables" / "user.rowwise").unlink()


def int4_declared(d: Path):
    text = (d / "model.yaml").read_text().replace("embedding_precision: int8", "embedding_precision: int4")
    (d / "model.yaml").write_text(text)


def unlisted(d: Path):
    text = (d / "model.yaml").read_text().replace("quantized_tables: [user, country]", "quantized_tables: [country]")
    (d / "model.yaml").write_text(text)


@pytest.mark.parametrize("name, breaks, field, says", [
    ("magic", corrupt_magic, "tables/user.rowwise", "not a rowwise table file"),
    ("truncated", truncate, "tables/user.rowwise", "want the header and"),
    ("another table's file", other_table, "tables/user.rowwise", "and model.pt's emb_user is"),
    ("a NaN scale", nan_scale, "tables/user.rowwise", "row 3's scale or bias"),
    ("missing", missing, "tables/user.rowwise", "no such file"),
    ("bits other than embedding_precision's", int4_declared, "tables/user.rowwise", "8-bit codes"),
    ("a placeholder not listed", unlisted, "quantized_tables", "emb_user holds no rows"),
])
def test_a_broken_shipped_table_is_refused_naming_it(demo, tmp_path, name, breaks, field, says):
    d = shipped(demo, tmp_path / "m", "embedding_precision: int8\nquantized_tables: [user, country]\n")
    breaks(d)
    result = check(d)
    assert result.returncode == 1, f"{name}: {result.stdout}{result.stderr}"
    assert field in result.stderr and says in result.stderr, f"{name}: {result.stderr}"


def test_shipped_tables_need_the_rewritten_forward(demo, tmp_path):
    d = shipped(demo, tmp_path / "m", "embedding_precision: int8\nquantized_tables: [user]\n")
    result = subprocess.run([binary(), "check-model", str(d), "--graph-optimizations", "off"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1, result.stdout
    assert "quantized_tables run in the rewritten forward" in result.stderr and "quantized_tables" in result.stderr


def test_export_refuses_what_has_no_rowwise_form(demo, tmp_path):
    module = torch.jit.load(str(demo / "ranker_a" / "model.pt"))
    with torch.no_grad():
        module.emb_user[5, 0] = -1e6  # beyond fp16: no fp16 bias holds the row's min
    spec = numaserve.ModelSpec.parse(yaml_with(demo, "embedding_precision: int8\nquantized_tables: [user]\n"), "model.yaml")
    with pytest.raises(numaserve.ExportError) as e:
        numaserve.export(module, spec, tmp_path / "m")
    assert e.value.field == "tables.user"
    assert not (tmp_path / "m").exists()
