"""A trained module to a model directory the service loads: model.pt + model.yaml.

What the service would only find at load (or worse, as wrong scores) is
checked here first: the forward signature, the embedding tables' rows
against model.yaml, and a forward on a synthetic batch. The directory
appears complete or not at all: both files are written into a temporary
directory beside it, which is then renamed into place -- the rule by which
a reader of the parent directory knows a model directory is finished.
"""
import os
import pathlib
import shutil
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


def _check_tables(scripted, spec):
    """Every emb_<table> (a parameter, or the weight of a submodule such as
    an nn.EmbeddingBag) must have model.yaml's rows: hashed ids go up to
    rows - 1, and a smaller table would be read past its end."""
    found = {name: p for name, p in scripted.named_parameters(recurse=False) if name.startswith("emb_")}
    for name, child in scripted.named_children():
        if name.startswith("emb_") and hasattr(child, "weight"):
            found[name] = child.weight
    for name, weight in sorted(found.items()):
        table = name[len("emb_"):]
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


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def export(module, spec, dir, overwrite=False, rows=4):
    """Scripts `module` (unless it already is TorchScript), checks it
    against `spec` (a ModelSpec), and writes dir/model.pt and dir/model.yaml
    atomically. Refuses an existing `dir` unless overwrite=True (then the old
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
        scripted.save(str(tmp / "model.pt"))
        (tmp / "model.yaml").write_text(spec.text, encoding="utf-8")
        _check_forward(torch.jit.load(str(tmp / "model.pt")), spec, rows)  # what was written loads and runs
        for name in ("model.pt", "model.yaml"):
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
