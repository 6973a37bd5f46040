#!/usr/bin/python3
"""From a training script to a served model, end to end (docs/train-to-serve.md).

1. Features: the demo feature store (`numaserve make-demo-models`) and this
   directory's model.yaml, the contract between training and serving.
2. Clicks: synthetic /predict requests over the store's users and items,
   labelled by a known rule (ground_truth below), so the ranking a model
   learns can be checked.
3. Training: a small DLRM (bottom MLP, one embedding bag per sparse
   feature, dot interaction, top MLP) on tensors extracted by the numaserve
   package: the very tensors /predict will feed it.
4. Export: numaserve.export (checked against model.yaml, written atomically),
   then `numaserve check-model` on the directory, as a pipeline would
   before it ships a model.
5. Serving: `numaserve serve` on loopback (numaserve.LocalServer); every
   held-out request's /predict scores must equal the trained module's on the
   package's extraction within --tolerance, and the served scores' AUC on the
   held-out clicks must reach --min-auc.
6. bf16 and int8: where the CPU has bf16 (int8: VNNI) instructions, the same
   requests served with --precision bf16 (int8: int8 tables and linear
   layers); numaserve.drift compares each with fp32
   and the AUC may lose at most --max-auc-loss (0.1%) and --max-int8-auc-loss (0.2%).

    /usr/bin/python3 examples/train-to-serve/train_to_serve.py --binary build/service/numaserve --work /tmp/t2s

Exit 0 when both checks hold, 1 when one fails; results in WORK/results.json.
Needs the numaserve package importable (pip install ./python, or PYTHONPATH=python).
"""
import argparse
import json
import math
import pathlib
import random
import subprocess
import sys
import time
from typing import List

import torch
from torch import Tensor

import numaserve
from numaserve.local import find_binary

HERE = pathlib.Path(__file__).resolve().parent
DEVICES = ["web", "app", "tablet"]


def ground_truth(user, item, context):
    """P(click) for a user, an item and a context: the rule the model has to
    find. Segment s<k> likes the categories cat<c> with c = k (mod 4); items
    over 500 are clicked less; the app clicks more."""
    affinity = int(user["segment"][1:]) % 4 == int(item["category"][3:]) % 4
    logit = -2.0 + 3.0 * affinity - 1.0 * (item["price"] > 500) + 0.7 * (context["device"] == "app")
    return 1.0 / (1.0 + math.exp(-logit))


def make_clicks(store, requests, items_per_request, seed):
    """/predict bodies with a "labels" list (RequestDataset's format)."""
    rng = random.Random(seed)
    users, items = sorted(store.users), sorted(store.items)
    out = []
    for _ in range(requests):
        user = rng.choice(users)
        context = {"hour": rng.randrange(24), "device": rng.choice(DEVICES)}
        chosen = rng.sample(items, items_per_request)
        labels = [int(rng.random() < ground_truth(store.users[user], store.items[i], context)) for i in chosen]
        out.append({"user": {"id": user}, "context": context, "items": [{"id": i} for i in chosen],
                    "labels": labels})
    return out


class DLRM(torch.nn.Module):
    """The reference DLRM's shape, sized for seconds of CPU training. The
    tables are parameters named emb_<table> (what numaserve checks against
    model.yaml); forward's inputs are model.yaml's, in its order."""

    SPARSE = ["segment", "country", "recent_items", "id", "category", "brand", "tags", "device"]

    def __init__(self, spec, dim=16):
        super().__init__()
        got = [f.name for f in spec.sparse_features]
        if got != self.SPARSE:
            raise ValueError(f"model.yaml's sparse features {got} are not the {self.SPARSE} forward reads")
        for table, rows in spec.tables.items():
            self.register_parameter(f"emb_{table}", torch.nn.Parameter(torch.randn(rows, dim) * 0.05))
        self.bottom = torch.nn.Sequential(torch.nn.Linear(spec.dense_width, 32), torch.nn.ReLU(),
                                          torch.nn.Linear(32, dim), torch.nn.ReLU())
        vectors = len(self.SPARSE) + 1
        li, lj = torch.tril_indices(vectors, vectors, offset=-1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)
        self.top = torch.nn.Sequential(torch.nn.Linear(dim + li.numel(), 32), torch.nn.ReLU(),
                                       torch.nn.Linear(32, 1))

    def bag(self, table: Tensor, indices: Tensor, offsets: Tensor) -> Tensor:
        return torch.nn.functional.embedding_bag(indices, table, offsets, mode="mean")

    def forward(self, dense: Tensor, indices: List[Tensor], offsets: List[Tensor]) -> Tensor:
        x = self.bottom(dense)
        t = torch.stack([x,
                         self.bag(self.emb_segment, indices[0], offsets[0]),
                         self.bag(self.emb_country, indices[1], offsets[1]),
                         self.bag(self.emb_item, indices[2], offsets[2]),
                         self.bag(self.emb_item, indices[3], offsets[3]),
                         self.bag(self.emb_category, indices[4], offsets[4]),
                         self.bag(self.emb_brand, indices[5], offsets[5]),
                         self.bag(self.emb_tag, indices[6], offsets[6]),
                         self.bag(self.emb_device, indices[7], offsets[7])], dim=1)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        return torch.sigmoid(self.top(torch.cat([x, z], dim=1))).reshape(-1)


def train(spec, store, clicks, epochs, batch_requests, seed, lr=0.01):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    samples = []
    for body in clicks:
        body = dict(body)
        labels = torch.tensor(body.pop("labels"), dtype=torch.float32)
        samples.append((spec.extract(body, store), labels))
    model = DLRM(spec)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = torch.nn.BCELoss()
    losses = []
    for _ in range(epochs):
        rng.shuffle(samples)
        total = 0.0
        for start in range(0, len(samples), batch_requests):
            batch, labels = numaserve.collate(samples[start:start + batch_requests])
            loss = loss_fn(model(*batch), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * labels.numel()
        losses.append(total / sum(s[1].numel() for s in samples))
    return model.eval(), losses


def auc(scores, labels):
    """Area under the ROC curve: the chance a random click outranks a random
    non-click (ties count half)."""
    value = numaserve.drift.auc(scores, labels)
    if value is None:
        raise ValueError("auc: the held-out clicks need both clicks and non-clicks")
    return value


def serve_and_compare(binary, model_dir, store_path, spec, store, model, held_out):
    """Every held-out request through /predict; the largest difference from
    the module's own scores, and the served scores and labels."""
    worst, served, labels = 0.0, [], []
    with numaserve.LocalServer(model_dir, feature_store=store_path, binary=binary,
                               args=["--workers", "1", "--intra-op-threads", "1"]) as server:
        for body in held_out:
            request = {k: v for k, v in body.items() if k != "labels"}
            scores = server.predict(dict(request, model=spec.name))["scores"]
            with torch.no_grad():
                expected = model(*spec.extract(request, store)).tolist()
            if len(scores) != len(expected):
                raise AssertionError(f"{len(scores)} scores served for {len(expected)} items")
            worst = max([worst] + [abs(a - b) for a, b in zip(scores, expected)])
            served += scores
            labels += body["labels"]
    return worst, served, labels


def serve_narrowed(binary, model_dir, store_path, spec, held_out, precision):
    """The held-out requests served with --precision PRECISION (bf16 or
    int8, the tables following): each request's scores, or None and why this
    CPU cannot (check-model's refusal: no such instructions here). Asked
    outright, not -if-available: the point is its AUC, not its speed."""
    checked = subprocess.run([binary, "check-model", str(model_dir), "--precision", precision],
                             capture_output=True, text=True)
    if checked.returncode != 0:
        return None, checked.stderr.strip().splitlines()[-1]
    with numaserve.LocalServer(model_dir, feature_store=store_path, binary=binary,
                               args=["--workers", "1", "--intra-op-threads", "1",
                                     "--precision", precision]) as server:
        _, placement = server.request("GET", "/placement")
        report = next(m["precision"] for m in placement["models"] if m["name"] == spec.name)
        if report["served"] != precision:
            return None, report.get("reason", "")
        return [server.predict(dict({k: v for k, v in body.items() if k != "labels"}, model=spec.name))["scores"]
                for body in held_out], ""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=None, help="numaserve (default: $NUMASERVE_BINARY, else on PATH)")
    p.add_argument("--work", required=True, type=pathlib.Path, help="where the store, clicks and model go")
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--items", type=int, default=3000)
    p.add_argument("--train-requests", type=int, default=6000)
    p.add_argument("--held-out-requests", type=int, default=300)
    p.add_argument("--items-per-request", type=int, default=10)
    p.add_argument("--epochs", type=int, default=2, help="more overfits the item ids: held-out AUC falls")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tolerance", type=float, default=1e-6, help="largest |served - trained| score difference")
    p.add_argument("--min-auc", type=float, default=0.75)
    p.add_argument("--max-auc-loss", type=float, default=0.001, help="bf16's AUC below fp32's, relative")
    p.add_argument("--max-int8-auc-loss", type=float, default=0.002, help="int8's AUC below fp32's, relative")
    a = p.parse_args(argv)
    torch.set_num_threads(1)  # the sums' order fixed: the same model every run
    binary = find_binary(a.binary)
    a.work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()

    subprocess.run([binary, "make-demo-models", str(a.work / "demo"), "--embedding-mb", "1", "--users",
                    str(a.users), "--items", str(a.items)], check=True, capture_output=True)
    store_path = a.work / "demo" / "store.jsonl"
    store = numaserve.FeatureStore.from_jsonl(store_path)
    spec = numaserve.ModelSpec.load(HERE)
    spec.check_store(store)
    clicks = make_clicks(store, a.train_requests, a.items_per_request, a.seed)
    held_out = make_clicks(store, a.held_out_requests, a.items_per_request, a.seed + 1)
    with open(a.work / "clicks.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(c) + "\n" for c in clicks)
    print(f"clicks: {len(clicks)} training requests, {len(held_out)} held out, "
          f"{sum(map(sum, (c['labels'] for c in clicks)))} clicks in training", flush=True)

    t1 = time.monotonic()
    model, losses = train(spec, store, clicks, a.epochs, 16, a.seed)
    print(f"training: {a.epochs} epochs in {time.monotonic() - t1:.1f} s, log loss by epoch "
          + " ".join(f"{x:.4f}" for x in losses), flush=True)

    model_dir = numaserve.export(model, spec, a.work / "models" / spec.name, overwrite=True)
    checked = subprocess.run([binary, "check-model", str(model_dir)], capture_output=True, text=True)
    print(f"check-model: exit {checked.returncode}\n{checked.stdout.strip()}", flush=True)
    if checked.returncode != 0:
        print(checked.stderr, file=sys.stderr)
        return 1

    worst, served, labels = serve_and_compare(binary, model_dir, store_path, spec, store, model, held_out)
    truth = [ground_truth(store.users[b["user"]["id"]], store.items[i["id"]], b["context"])
             for b in held_out for i in b["items"]]
    results = {"served_vs_trained_max_abs_diff": worst, "tolerance": a.tolerance,
               "served_auc": auc(served, labels), "ground_truth_auc": auc(truth, labels), "min_auc": a.min_auc,
               "held_out_rows": len(served), "log_loss_by_epoch": losses, "seconds": time.monotonic() - t0}
    (a.work / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"served: {len(served)} scores, max |served - trained| = {worst:.3g} (tolerance {a.tolerance:g}); "
          f"AUC {results['served_auc']:.4f} (the rule itself: {results['ground_truth_auc']:.4f}, "
          f"wanted >= {a.min_auc}); {results['seconds']:.1f} s in all", flush=True)
    ok = worst <= a.tolerance and results["served_auc"] >= a.min_auc

    # 6. bf16 and int8 where this CPU has them: the same requests, their
    # drift from fp32 by numaserve.drift (the definitions check-model
    # reports), and the AUC within its bound of fp32's.
    per_request = [len(b["items"]) for b in held_out]
    fp32 = [served[sum(per_request[:i]):sum(per_request[:i + 1])] for i in range(len(held_out))]
    for precision, max_loss in (("bf16", a.max_auc_loss), ("int8", a.max_int8_auc_loss)):
        scores, why = serve_narrowed(binary, model_dir, store_path, spec, held_out, precision)
        if scores is None:
            print(f"{precision}: not here ({why}): fp32 only", flush=True)
            continue
        report = numaserve.drift.compare(fp32, scores, [b["labels"] for b in held_out])
        loss = 1 - report.candidate_quality.auc / report.reference_quality.auc
        results[precision] = {"max_abs": report.max_abs, "mean_abs": report.mean_abs,
                              "min_spearman": report.min_spearman, "mean_top10": report.mean_top10,
                              "auc": report.candidate_quality.auc, "auc_loss": loss, "max_auc_loss": max_loss}
        (a.work / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        print(f"{precision}: max |{precision} - fp32| = {report.max_abs:.3g}, mean {report.mean_abs:.3g}, Spearman per "
              f"request >= {report.min_spearman:.4f}, top-10 overlap {report.mean_top10:.3f}; AUC "
              f"{report.candidate_quality.auc:.4f} against fp32's {report.reference_quality.auc:.4f} "
              f"({100 * loss:+.3f}% lost, at most {100 * max_loss:g}%)", flush=True)
        ok = ok and loss <= max_loss
    print("ok" if ok else "FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
