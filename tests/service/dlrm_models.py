"""Writes the DLRM-style model directories the graph-rewrite tests load
(tests/service/graph_test.cpp): scripted with PyTorch from the reference
DLRM's structure (facebookresearch/dlrm, dlrm_s_pytorch.py: bottom MLP,
one nn.EmbeddingBag per table, `bmm(T, T^T)` then `Z[:, li, lj]`, top MLP),
in the variants the rewrites must handle and the ones they must leave alone,
and one whose scores bf16 would change too much (precision_test.cpp).

    /usr/bin/python3 dlrm_models.py OUTDIR
    /usr/bin/python3 dlrm_models.py --like MODEL_DIR NAME OUTDIR

The second form writes one reference DLRM over another model's feature
contract (its model.yaml, renamed): the benchmark's DLRM-style model, fed
the same requests as the demo rankers (bench/forward.sh).
"""
import sys
from pathlib import Path
from typing import List

import yaml

import torch
from torch import nn

DENSE = 4
DIM = 16
# (table, rows, kind): a table of one row, small ones, one wider.
TABLES = [("one", 1, "id"), ("small", 7, "id_list"), ("mid", 500, "id_list"), ("big", 5000, "id")]


def mlp(sizes, sigmoid_last=False):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        layers.append(nn.ReLU() if i + 2 < len(sizes) or not sigmoid_last else nn.Identity())
    return nn.Sequential(*layers)


def triangle(n, diagonal):
    li = [i for i in range(n) for j in range(i + (1 if diagonal else 0))]
    lj = [j for i in range(n) for j in range(i + (1 if diagonal else 0))]
    return li, lj


class Dlrm(nn.Module):
    """The reference interaction: cat + view, bmm, Z[:, li, lj]."""

    def __init__(self, mode="sum", diagonal=False, dense=DENSE, rows=tuple(r for _, r, _ in TABLES), dim=DIM,
                 bottom=(32,), top=(32,)):
        super().__init__()
        self.bot = mlp([dense, *bottom, dim])
        self.embs = nn.ModuleList([nn.EmbeddingBag(r, dim, mode=mode) for r in rows])
        li, lj = triangle(len(rows) + 1, diagonal)
        self.register_buffer("li", torch.tensor(li))
        self.register_buffer("lj", torch.tensor(lj))
        self.top = mlp([dim + len(li), *top, 1], sigmoid_last=True)

    def forward(self, dense: torch.Tensor, indices: List[torch.Tensor], offsets: List[torch.Tensor]) -> torch.Tensor:
        x = self.bot(dense)
        ly: List[torch.Tensor] = []
        for k, emb in enumerate(self.embs):
            ly.append(emb(indices[k], offsets[k]))
        batch_size, d = x.shape
        T = torch.cat([x] + ly, dim=1).view((batch_size, -1, d))
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        Zflat = Z[:, self.li, self.lj]
        R = torch.cat([x] + [Zflat], dim=1)
        return torch.sigmoid(self.top(R)).flatten()


class DlrmFlatWeighted(nn.Module):
    """The demo model's interaction (stack, flatten, index_select) with the
    diagonal, mean bags, and a sum bag with per-sample weights."""

    def __init__(self):
        super().__init__()
        self.bot = mlp([DENSE, 32, DIM])
        self.embs = nn.ModuleList([nn.EmbeddingBag(rows, DIM, mode="mean") for _, rows, _ in TABLES])
        self.weighted = nn.EmbeddingBag(TABLES[2][1], DIM, mode="sum")
        n = len(TABLES) + 2
        self.register_buffer("pairs", torch.tensor([i * n + j for i in range(n) for j in range(i + 1)]))
        self.top = mlp([DIM + n * (n + 1) // 2, 32, 1], sigmoid_last=True)

    def forward(self, dense: torch.Tensor, indices: List[torch.Tensor], offsets: List[torch.Tensor]) -> torch.Tensor:
        x = self.bot(dense)
        vectors = [x]
        for k, emb in enumerate(self.embs):
            vectors.append(emb(indices[k], offsets[k]))
        weights = (indices[2] % 3).to(torch.float32) * 0.5 + 0.25
        vectors.append(self.weighted(indices[2], offsets[2], per_sample_weights=weights))
        t = torch.stack(vectors, 1)
        z = torch.bmm(t, t.transpose(1, 2)).flatten(1).index_select(1, self.pairs)
        return torch.sigmoid(self.top(torch.cat([x, z], 1))).flatten()


class LeftAlone(nn.Module):
    """Patterns the rewrites must not touch: a bmm of two different tensors,
    a selection that is not a lower triangle, a max bag, a padding_idx."""

    def __init__(self):
        super().__init__()
        self.bot = mlp([DENSE, DIM])
        self.other = mlp([DENSE, DIM])
        self.embs = nn.ModuleList([nn.EmbeddingBag(TABLES[0][1], DIM, mode="max"),
                                   nn.EmbeddingBag(TABLES[1][1], DIM, mode="sum", padding_idx=0)])
        li, lj = triangle(3, False)
        self.register_buffer("ui", torch.tensor(lj))  # the upper triangle
        self.register_buffer("uj", torch.tensor(li))

    def forward(self, dense: torch.Tensor, indices: List[torch.Tensor], offsets: List[torch.Tensor]) -> torch.Tensor:
        x = self.bot(dense)
        y = self.other(dense)
        a = self.embs[0](indices[0], offsets[0])
        b = self.embs[1](indices[1], offsets[1])
        T = torch.stack([x, a, b], 1)
        U = torch.stack([y, a, b], 1)
        cross = torch.bmm(T, torch.transpose(U, 1, 2)).flatten(1)
        upper = torch.bmm(T, torch.transpose(T, 1, 2))[:, self.ui, self.uj]
        return torch.sigmoid(cross.sum(1) + upper.sum(1))


class Drifting(nn.Module):
    """A model whose scores magnify its tables' rounding: unbounded scores,
    a thousand times the sum of a bag's elements. In bf16 (2^-9 relative
    rounding) they stray far past any bound a ranking model would allow:
    the load must refuse it."""

    def __init__(self):
        super().__init__()
        self.embs = nn.ModuleList([nn.EmbeddingBag(rows, DIM, mode="sum") for _, rows, _ in TABLES])

    def forward(self, dense: torch.Tensor, indices: List[torch.Tensor], offsets: List[torch.Tensor]) -> torch.Tensor:
        total = dense.sum(1)
        for k, emb in enumerate(self.embs):
            total = total + emb(indices[k], offsets[k]).sum(1) * 1000
        return total


class SharedTable(nn.Module):
    """A table the bags read and another op reads too (the rows of a
    request's ids, gathered, scale the score; not a constant the freeze could
    fold): bf16 must leave that table fp32, and convert the others."""

    def __init__(self):
        super().__init__()
        self.embs = nn.ModuleList([nn.EmbeddingBag(rows, DIM, mode="mean") for _, rows, _ in TABLES])
        self.top = mlp([DIM * len(TABLES), 1], sigmoid_last=True)

    def forward(self, dense: torch.Tensor, indices: List[torch.Tensor], offsets: List[torch.Tensor]) -> torch.Tensor:
        ly: List[torch.Tensor] = []
        for k, emb in enumerate(self.embs):
            ly.append(emb(indices[k], offsets[k]))
        scale = torch.index_select(self.embs[3].weight, 0, indices[3]).abs().sum() * 1e-4
        return torch.sigmoid(self.top(torch.cat(ly, 1)) * (1 + scale)).flatten()


def model_yaml(name, tables):
    lines = [f"name: {name}", 'version: "1"', "hash_seed: 0", "tables:"]
    lines += [f"  {t}: {rows}" for t, rows, _ in tables]
    lines.append("features:")
    lines += [f"  - {{name: d{i}, source: item, kind: numeric}}" for i in range(DENSE)]
    for t, _, kind in tables:
        extra = ", max_len: 100" if kind == "id_list" else ""
        lines.append(f"  - {{name: f_{t}, source: item, kind: {kind}, table: {t}{extra}}}")
    return "\n".join(lines) + "\n"


def write(out: Path, name, module, tables):
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    torch.jit.script(module.eval()).save(str(d / "model.pt"))
    (d / "model.yaml").write_text(model_yaml(name, tables))


def like(model_dir: Path, name: str, out: Path):
    """ranker_a's sizes: embeddings of 32, bottom 64, top 128 and 64."""
    spec = yaml.safe_load((model_dir / "model.yaml").read_text())
    sparse = [f for f in spec["features"] if f["kind"] in ("id", "id_list")]
    dense = [f for f in spec["features"] if f["kind"] == "numeric"]
    module = Dlrm(mode="mean", dense=len(dense), rows=[spec["tables"][f["table"]] for f in sparse], dim=32,
                  bottom=(64,), top=(128, 64))
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    torch.jit.script(module.eval()).save(str(d / "model.pt"))
    spec["name"] = name
    (d / "model.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


def main():
    if sys.argv[1] == "--like":
        torch.manual_seed(0)
        like(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))
        return
    out = Path(sys.argv[1])
    torch.manual_seed(0)
    write(out, "dlrm", Dlrm(), TABLES)
    write(out, "dlrm_diagonal_mean", Dlrm(mode="mean", diagonal=True), TABLES)
    write(out, "dlrm_flat_weighted", DlrmFlatWeighted(), TABLES)
    write(out, "left_alone", LeftAlone(), TABLES[:2])
    write(out, "drifting", Drifting(), TABLES)
    write(out, "shared_table", SharedTable(), TABLES)


if __name__ == "__main__":
    main()
