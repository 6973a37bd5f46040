"""A trained module to a model directory the service loads: model.pt + model.yaml
(+ tables/<name>.rowwise for model.yaml's quantized_tables).

What the service would only find at load (or worse, as wrong scores) is
checked here first: the forward signature, the embedding tables' rows
against model.yaml, and a forward on a synthetic batch. The directory
appears complete or not at all: both files are written into a temporary
directory beside it, which is then renamed into place -- the rule by which
a reader of the parent directory knows a model directory is finished.
"""
import contextlib
import os
import pathlib
import shutil
import struct
import tempfile

import torch

from .errors import NumaserveError

_SIGNATURE = "forward(self, dense: Tensor, indices: List[Tensor], offsets: List[Tensor]) -> Tensor"


class ExportError(NumaserveError):
    """A module the service would refuse or misread; `field` names what is
    wrong ("forward", "tables.user", "output")."""


def _check_signature(scripted):
    schema = scripted._c._get_method("forward").schema
    args = [(a.name, str(a.type)) for a in schema.arguments[1:]]
    types = [t for _, t in args]
    returns = [str(r.type) for r in schema.returns]
    if types != ["Tensor", "List[Tensor]", "List[Tensor]"] or returns != ["Tensor"]:
        got = ", ".join(f"{n}: {t}" for n, t in args)
        raise ExportError("forward", f"forward: want {_SIGNATURE}, got forward(self, {got}) -> {', '.join(returns)}")


def _table_slots(scripted):
    """Every emb_<table> of the module: (table, owner, attribute)."""
    slots = [(name[len("emb_"):], scripted, name) for name, _ in scripted.named_parameters(recurse=False)
             if name.startswith("emb_")]
    slots += [(name[len("emb_"):], child, "weight") for name, child in scripted.named_children()
              if name.startswith("emb_") and hasattr(child, "weight")]
    return slots


def _check_tables(scripted, spec):
    """Every emb_<table> (a parameter, or the weight of a submodule such as
    an nn.EmbeddingBag) must have model.yaml's rows: hashed ids go up to
    rows - 1, and a smaller table would be read past its end."""
    found = {table: getattr(owner, attribute) for table, owner, attribute in _table_slots(scripted)}
    for table, weight in sorted(found.items()):
        name = "emb_" + table
        if table not in spec.tables:
            raise ExportError("tables", f"{name}: model.yaml has no table '{table}' (tables: {', '.join(spec.tables)})")
        if weight.dim() < 1 or weight.shape[0] != spec.tables[table]:
            rows = weight.shape[0] if weight.dim() else 0
            raise ExportError(f"tables.{table}",
                              f"table '{table}' has {spec.tables[table]} rows in model.yaml but {rows} in the module")


def _check_forward(module, spec, rows):
    """A batch of `rows` items whose features all take their defaults."""
    batch = spec.extract_rows(user={"id": ""}, items=[{"id": ""}] * rows)
    with torch.no_grad():
        out = module(*batch)
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float32:
        raise ExportError("output", f"output: want float32 scores, got {getattr(out, 'dtype', type(out).__name__)}")
    if tuple(out.shape) not in ((rows,), (rows, 1)):
        raise ExportError("output", f"output: want [{rows}] or [{rows}, 1] for {rows} rows, got {list(out.shape)}")
    if not torch.isfinite(out).all():
        raise ExportError("output", "output: scores that are not finite (NaN or infinity) on a batch of defaults")


# tables/<name>.rowwise (the service's kernels/rowwise_file.h): a 32-byte
# little-endian header -- "NUMAROWS", version 1, the bits of a code, rows,
# dim -- then each row's codes (int4: two a byte, the even column low), its
# fp16 scale and its fp16 bias.
_ROWWISE_MAGIC = b"NUMAROWS"
_ROWWISE_SLICE = 1 << 16  # rows quantized at a time: the float64 copy stays small


def _rowwise_slice(w, bits, table):
    """Rows of float32 `w` as the service's quantize_rows makes them, bit for
    bit: bias = fp16(min), scale = fp16((max - min) / (2^bits - 1)) in float32,
    each code round-half-even of (x - bias) / scale in float64, clamped."""
    if not torch.all(w.abs() <= 65504):
        raise ExportError(f"tables.{table}", f"table '{table}': values that are not finite or beyond fp16's range "
                                             "(65504) have no rowwise scale and bias; ship it in fp32")
    top = (1 << bits) - 1
    lo, hi = w.min(dim=1).values, w.max(dim=1).values
    bias16, scale16 = lo.to(torch.float16), ((hi - lo) / float(top)).to(torch.float16)
    if not (torch.isfinite(bias16).all() and torch.isfinite(scale16).all()):
        raise ExportError(f"tables.{table}", f"table '{table}': a row's scale or bias is beyond fp16's range; ship it in fp32")
    bias, scale = bias16.double().unsqueeze(1), scale16.double().unsqueeze(1)
    v = torch.where(scale == 0, torch.zeros_like(bias), (w.double() - bias) / scale)
    codes = torch.round(v.clamp(0, top)).to(torch.uint8)
    if bits == 4:
        codes = codes[:, 0::2] | (codes[:, 1::2] << 4)
    tail = torch.stack([scale16.view(torch.int16), bias16.view(torch.int16)], dim=1).contiguous().view(torch.uint8)
    return torch.cat([codes, tail.reshape(len(w), 4)], dim=1).numpy().tobytes()


def _write_rowwise(path, weight, bits, table):
    w = weight.detach().to(torch.float32)
    if w.dim() != 2:
        raise ExportError(f"tables.{table}", f"table '{table}': want a 2-D table, got {list(w.shape)}")
    rows, dim = w.shape
    if bits == 4 and dim % 2:
        raise ExportError("embedding_precision", f"table '{table}': int4 packs two codes a byte, and its dim {dim} is odd")
    with open(path, "wb") as f:
        f.write(_ROWWISE_MAGIC + struct.pack("<IIQQ", 1, bits, rows, dim))
        for start in range(0, rows, _ROWWISE_SLICE):
            f.write(_rowwise_slice(w[start:start + _ROWWISE_SLICE].contiguous(), bits, table))


@contextlib.contextmanager
def _shipped_apart(scripted, spec, tmp):
    """model.yaml's quantized_tables written to tmp/tables, and a placeholder
    (one value seen as [rows, dim], never materialized) in each one's place
    in `scripted` while it is saved; the tables put back afterwards."""
    if not spec.quantized_tables:
        yield
        return
    bits = 8 if spec.embedding_precision == "int8" else 4
    slots = {table: (owner, attribute) for table, owner, attribute in _table_slots(scripted)}
    (tmp / "tables").mkdir()
    kept = []
    try:
        for table in spec.quantized_tables:
            if table not in slots:
                raise ExportError("quantized_tables", f"quantized_tables lists '{table}', and the module has no emb_{table}")
            owner, attribute = slots[table]
            weight = getattr(owner, attribute)
            _write_rowwise(tmp / "tables" / f"{table}.rowwise", weight, bits, table)
            kept.append((owner, attribute, weight))
            placeholder = torch.zeros(1, 1, dtype=weight.dtype).expand(weight.shape[0], weight.shape[1])
            setattr(owner, attribute, torch.nn.Parameter(placeholder, requires_grad=False))
        yield
    finally:
        for owner, attribute, weight in reversed(kept):
            setattr(owner, attribute, weight)


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def export(module, spec, dir, overwrite=False, rows=4):
    """Scripts `module` (unless it already is TorchScript), checks it
    against `spec` (a ModelSpec), and writes dir/model.pt and dir/model.yaml
    atomically, and model.yaml's quantized_tables as tables/<name>.rowwise
    (model.pt then holds a placeholder in each one's place; the module is
    left as it was). Refuses an existing `dir` unless overwrite=True (then the old
    directory is moved aside and deleted once the new one is in place).
    Returns dir as a pathlib.Path; raises ExportError naming what is wrong."""
    dir = pathlib.Path(dir)
    if dir.exists() and not overwrite:
        raise FileExistsError(f"{dir}: exists (pass overwrite=True to replace it)")
    was_training = getattr(module, "training", False)
    module.eval()
    try:
        scripted = module if isinstance(module, torch.jit.ScriptModule) else torch.jit.script(module)
    finally:
        module.train(was_training)
    _check_signature(scripted)
    _check_tables(scripted, spec)
    _check_forward(scripted, spec, rows)
    dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{dir.name}.", suffix=".tmp", dir=dir.parent))
    try:
        with _shipped_apart(scripted, spec, tmp):
            scripted.save(str(tmp / "model.pt"))
        (tmp / "model.yaml").write_text(spec.text, encoding="utf-8")
        _check_forward(torch.jit.load(str(tmp / "model.pt")), spec, rows)  # what was written loads and runs
        for name in ["model.pt", "model.yaml"] + [f"tables/{t}.rowwise" for t in spec.quantized_tables]:
            _fsync(tmp / name)
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide the model from the service's user
        if dir.exists():
            old = dir.with_name(f".{dir.name}.{os.getpid()}.old")
            os.rename(dir, old)
            os.rename(tmp, dir)
            shutil.rmtree(old)
        else:
            os.rename(tmp, dir)
        _fsync(dir.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dir
