"""`numaserve check-model DIR` against model directories scripted here with
Debian's PyTorch: a good one is servable (exit 0, its cost reported), and
each kind of broken one is refused (exit 1) naming model.pt or model.yaml
and the field, before a replica would have found out per request."""

import os
import shutil
import subprocess
from pathlib import Path
from typing import List

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "fixtures" / "features" / "model.yaml"


def binary() -> str:
    path = os.environ.get("NUMASERVE_BINARY")
    assert path, "set NUMASERVE_BINARY to the numaserve binary"
    return path


class Ranker(torch.nn.Module):
    """Scores rows from the fixture's dense width and id bags; `shape`
    and `nan` make it return what a broken model returns."""

    def __init__(self, rows: int, cols: int = 2, nan: bool = False, int32_offsets: bool = False):
        super().__init__()
        self.emb = torch.nn.Parameter(torch.randn(rows, 4))  # one table for every bag: ids stay below `rows`
        self.cols = cols
        self.nan = nan
        self.int32_offsets = int32_offsets

    def forward(self, dense: torch.Tensor, indices: List[torch.Tensor], offsets: List[torch.Tensor]) -> torch.Tensor:
        out = dense.sum(1)
        for k in range(len(indices)):
            if self.int32_offsets:
                # As a model exported for int32 offsets does: the service sends int64.
                torch._assert(offsets[k].dtype == torch.int32, "offsets must be int32")
            out = out + torch.nn.functional.embedding_bag(indices[k], self.emb, offsets[k], mode="mean").sum(1)
        if self.nan:
            out = out * float("nan")
        return out.unsqueeze(1).repeat(1, self.cols) if self.cols != 1 else out.unsqueeze(1)


class OneInput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(1)


class WithItemTable(torch.nn.Module):
    """`inner` with a parameter named emb_item, which the service checks
    against model.yaml's tables.item."""

    def __init__(self, inner: torch.nn.Module, rows: int):
        super().__init__()
        self.inner = inner
        self.emb_item = torch.nn.Parameter(torch.zeros(rows, 4))

    def forward(self, dense: torch.Tensor, indices: List[torch.Tensor], offsets: List[torch.Tensor]) -> torch.Tensor:
        return self.inner(dense, indices, offsets)


class WithItemBag(torch.nn.Module):
    """`inner` with an nn.EmbeddingBag named emb_item: its weight is the
    table, as the reference DLRM's modules hold theirs."""

    def __init__(self, inner: torch.nn.Module, rows: int):
        super().__init__()
        self.inner = inner
        self.emb_item = torch.nn.EmbeddingBag(rows, 4, mode="sum")

    def forward(self, dense: torch.Tensor, indices: List[torch.Tensor], offsets: List[torch.Tensor]) -> torch.Tensor:
        return self.inner(dense, indices, offsets)


def model_dir(tmp_path: Path, module: torch.nn.Module, item_rows: int = 0) -> Path:
    directory = tmp_path / "model"
    directory.mkdir()
    torch.jit.script(WithItemTable(module, item_rows) if item_rows else module).save(str(directory / "model.pt"))
    shutil.copy(SPEC, directory / "model.yaml")
    return directory


def check(directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run([binary(), "check-model", str(directory)], capture_output=True, text=True, timeout=60)


MAX_ROWS = max(yaml.safe_load(SPEC.read_text())["tables"].values())


def test_a_good_model_is_servable_and_its_cost_reported(tmp_path):
    result = check(model_dir(tmp_path, Ranker(MAX_ROWS, cols=1)))
    assert result.returncode == 0, result.stderr
    assert "tiny_ranker version 01 is servable" in result.stdout
    assert "forward(dense: Tensor, indices: List[Tensor], offsets: List[Tensor]) -> Tensor" in result.stdout
    assert "resident after loading and one forward" in result.stdout


@pytest.mark.parametrize(
    "name, module, item_rows, file, field",
    [
        ("wrong signature", OneInput(), 0, "model.pt", "forward"),
        ("a table smaller than model.yaml's", Ranker(MAX_ROWS, cols=1), 10, "model.yaml", "tables.item"),
        ("int32 offsets", Ranker(MAX_ROWS, cols=1, int32_offsets=True), 0, "model.pt", "forward"),
        ("[N, 2] scores", Ranker(MAX_ROWS, cols=2), 0, "model.pt", "output"),
        ("NaN scores", Ranker(MAX_ROWS, cols=1, nan=True), 0, "model.pt", "output"),
    ],
)
def test_a_broken_model_is_refused_naming_file_and_field(tmp_path, name, module, item_rows, file, field):
    result = check(model_dir(tmp_path, module, item_rows))
    assert result.returncode == 1, f"{name}: {result.stdout}{result.stderr}"
    assert file in result.stderr, f"{name}: {result.stderr}"
    assert f"field {field}" in result.stderr or field in result.stderr, f"{name}: {result.stderr}"


def test_a_missing_directory_is_named(tmp_path):
    result = check(tmp_path / "nowhere")
    assert result.returncode == 1
    assert str(tmp_path / "nowhere" / "model.yaml") in result.stderr


def test_the_demo_models_are_servable(tmp_path):
    subprocess.run([binary(), "make-demo-models", str(tmp_path / "demo"), "--embedding-mb", "4", "--users", "10",
                    "--items", "20"], check=True, capture_output=True, timeout=120)
    for name in ("ranker_a", "ranker_b"):
        result = check(tmp_path / "demo" / name)
        assert result.returncode == 0, f"{name}: {result.stderr}"
    shutil.rmtree(tmp_path / "demo")


def test_a_table_held_by_an_embedding_bag_module_is_checked_too(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    torch.jit.script(WithItemBag(Ranker(MAX_ROWS, cols=1), 10)).save(str(directory / "model.pt"))
    shutil.copy(SPEC, directory / "model.yaml")
    result = check(directory)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "tables.item" in result.stderr and "10 in model.pt" in result.stderr, result.stderr
