"""Training data as the service will see it: a torch Dataset over JSON Lines
of /predict bodies, each with its labels.

    {"user": {"id": "u1"}, "context": {"hour": 9}, "items": [{"id": "i1"}, {"id": "i2"}], "labels": [1, 0]}

Each line is extracted by the package's copy of the service's extraction,
so the model trains on the very tensors /predict will feed it.
"""
import json

import torch
from torch.utils.data import Dataset

from .request import NO_LIMITS, RequestLimits


class RequestDataset(Dataset):
    """Line i is ((dense, indices, offsets), labels float32 [N]). Lines are
    read at construction and extracted when asked for; pass
    collate_fn=numaserve.collate to a DataLoader to join several."""

    def __init__(self, path, spec, store=None, label_key="labels", limits: RequestLimits = NO_LIMITS):
        self.spec, self.store, self.label_key, self.limits = spec, store, label_key, limits
        with open(path, encoding="utf-8") as f:
            self.lines = [line for line in f if line.strip()]
        if store is not None:
            spec.check_store(store)

    def __len__(self):
        return len(self.lines)

    def __getitem__(self, index):
        body = json.loads(self.lines[index])
        if self.label_key not in body:
            raise ValueError(f"line {index + 1}: no {self.label_key!r}")
        labels = torch.tensor(body.pop(self.label_key), dtype=torch.float32).reshape(-1)
        batch = self.spec.extract(body, self.store, self.limits)
        if labels.numel() != batch[0].shape[0]:
            raise ValueError(f"line {index + 1}: {labels.numel()} labels for {batch[0].shape[0]} items")
        return batch, labels
