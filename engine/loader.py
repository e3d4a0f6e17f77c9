"""Loading a model: bytes -> checked ModelProto -> IR with fixed shapes and inferred types.

Stricter than onnx: external data is read only from inside the model's own folder, opsets
must be known, cycles and undefined values are named, and every failure is a ModelError with
a one-line message.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import ModelProto, TensorProto

from engine.diagnostics import WARNING, Diagnostic
from engine.errors import ModelError
from engine.ir import onnx_io
from engine.ir.graph import Graph
from engine.ir.infer import infer_shapes
from engine.ir.type_check import type_errors
from engine.ir.verify import verify
from nodes.types import TensorType

MAX_MODEL_BYTES = 2 * 1024**3  # protobuf's own limit


def _read_model_bytes(path: Path) -> bytes:
    if not path.exists():
        raise ModelError(f"{path}: no such file")
    if path.is_dir():
        raise ModelError(f"{path}: is a folder, not an .onnx file")
    size = path.stat().st_size
    if size == 0:
        raise ModelError(f"{path}: file is empty")
    if size > MAX_MODEL_BYTES:
        raise ModelError(f"{path}: file is {size} bytes, over the 2 GiB protobuf limit")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ModelError(f"{path}: cannot read: {exc.strerror}") from exc


def parse_model(data: bytes, where: str) -> ModelProto:
    """Parse protobuf bytes into a ModelProto, refusing things that are not models."""
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ModelError(f"{where}: not an ONNX model (protobuf parse failed: {str(exc) or type(exc).__name__})") from None
    if not model.HasField("graph") or model.ir_version <= 0:
        raise ModelError(f"{where}: not an ONNX model (no graph or no IR version; truncated or another format?)")
    return model


def _tensors_with_external_data(model: ModelProto):
    def in_graph(g):
        yield from g.initializer
        for n in g.node:
            for a in n.attribute:
                if a.HasField("t"):
                    yield a.t
                yield from a.tensors
                if a.HasField("g"):
                    yield from in_graph(a.g)
                for sg in a.graphs:
                    yield from in_graph(sg)

    for t in in_graph(model.graph):
        if t.data_location == TensorProto.EXTERNAL:
            yield t


def load_external_data(model: ModelProto, base_dir: Path | None, where: str) -> None:
    """Read external tensor data from files strictly inside ``base_dir`` (no escapes)."""
    tensors = list(_tensors_with_external_data(model))
    if not tensors:
        return
    if base_dir is None:
        raise ModelError(f"{where}: tensor {tensors[0].name!r} has external data, but the model was "
                         "not loaded from a file (pass the path instead)")
    root = base_dir.resolve()
    for t in tensors:
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        if not loc:
            raise ModelError(f"{where}: tensor {t.name!r} has external data without a location")
        if os.path.isabs(loc) or loc.startswith(("/", "\\")) or (len(loc) > 1 and loc[1] == ":"):
            raise ModelError(f"{where}: tensor {t.name!r} external data location {loc!r} is an absolute path; "
                             "only files inside the model's folder are read")
        parts = Path(loc.replace("\\", "/")).parts
        if ".." in parts:
            raise ModelError(f"{where}: tensor {t.name!r} external data location {loc!r} leaves the model's folder")
        target = root / Path(*parts)
        real = target.resolve()
        if root != real and root not in real.parents:
            raise ModelError(f"{where}: tensor {t.name!r} external data location {loc!r} resolves outside the "
                             "model's folder (symlink?)")
        if not real.is_file():
            raise ModelError(f"{where}: tensor {t.name!r} external data file {loc!r} does not exist")
        try:
            offset = int(info.get("offset", "0") or 0)
            length = int(info["length"]) if info.get("length") else None
        except ValueError:
            raise ModelError(f"{where}: tensor {t.name!r} external data has a non-integer offset or length") from None
        size = real.stat().st_size
        if offset < 0 or (length is not None and length < 0):
            raise ModelError(f"{where}: tensor {t.name!r} external data has a negative offset or length")
        if offset > size or (length is not None and (length < 0 or offset + length > size)):
            raise ModelError(f"{where}: tensor {t.name!r} external data offset {offset} length {length} is past "
                             f"the end of {loc!r} ({size} bytes)")
        with open(real, "rb") as fh:
            fh.seek(offset)
            data = fh.read(length if length is not None else size - offset)
        t.raw_data = data
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT


def check_opsets(model: ModelProto, where: str) -> None:
    """Refuse opsets newer than the installed onnx knows."""
    known = onnx.defs.onnx_opset_version()
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version > known:
            raise ModelError(f"{where}: opset {o.version} is newer than this onnx knows (newest: {known})")
        if o.version < 1:
            raise ModelError(f"{where}: opset import of domain {o.domain or 'ai.onnx'!r} has version {o.version}")


def fix_shapes(graph: Graph, shapes: Mapping[str, Sequence[int]], where: str) -> None:
    """Replace dynamic input dims with the given sizes (``--shape NAME=D0,D1``)."""
    by_name = {v.name: v for v in graph.inputs}
    for name, dims in shapes.items():
        v = by_name.get(name)
        if v is None:
            raise ModelError(f"{where}: --shape names {name!r}, which is not an input "
                             f"(inputs: {', '.join(by_name) or 'none'})")
        dims = tuple(int(d) for d in dims)
        if any(d <= 0 for d in dims):
            raise ModelError(f"{where}: --shape {name}: dimensions must be positive, got {dims}")
        old = v.type.shape
        if old is not None and len(old) != len(dims):
            raise ModelError(f"{where}: input {name!r} has rank {len(old)} but --shape gives {len(dims)} dims")
        if old is not None:
            for k, (o, d) in enumerate(zip(old, dims)):
                if isinstance(o, int) and o != d:
                    raise ModelError(f"{where}: input {name!r} dimension {k} is fixed at {o}; --shape gives {d}")
        v.type = TensorType(v.type.dtype, dims)


def load(model: str | os.PathLike | ModelProto, shapes: Mapping[str, Sequence[int]] | None = None,
         check: bool = True, structure: Callable[[Graph], None] | None = None) -> Graph:
    """Load an ONNX model (path or ModelProto) into the IR.

    ``structure``, when given, is called with the graph as soon as it is converted, before it
    is verified, checked and inferred (its nodes and edges are final then, its types are not):
    a caller that lays the graph out elsewhere starts meanwhile (app/jobs.py).
    Raises ModelError with a one-line message naming the file and the problem.
    """
    if isinstance(model, ModelProto):
        where = model.graph.name or "model"
        proto = ModelProto()
        proto.CopyFrom(model)
        base_dir = None
    else:
        path = Path(model)
        where = str(path)
        proto = parse_model(_read_model_bytes(path), where)
        base_dir = path.parent
    return load_proto(proto, where, base_dir, shapes, check, structure)


def check_file(path: str | os.PathLike) -> None:
    """``check_proto`` of the model at ``path`` (its external data read as ``load`` reads it)."""
    path = Path(path)
    proto = parse_model(_read_model_bytes(path), str(path))
    load_external_data(proto, path.parent, str(path))
    check_proto(proto, str(path))


def check_proto(proto: ModelProto, where: str) -> None:
    """onnx's checker on ``proto`` (ops onnx does not define set aside); raises ModelError."""
    try:
        onnx.checker.check_model(_with_foreign_ops_aside(proto))
    except (onnx.checker.ValidationError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"{where}: invalid model: {first}") from None


def load_proto(proto: ModelProto, where: str, base_dir: Path | None,
               shapes: Mapping[str, Sequence[int]] | None, check: bool,
               structure: Callable[[Graph], None] | None = None) -> Graph:
    """Load a parsed ModelProto (see ``load``)."""
    check_opsets(proto, where)
    load_external_data(proto, base_dir, where)
    try:
        graph = onnx_io.from_onnx(proto)
    except onnx_io.ConversionError as exc:
        raise ModelError(f"{where}: {exc}") from None
    if structure is not None:
        structure(graph)
    errors = verify(graph)
    if errors:
        raise ModelError(f"{where}: {errors[0].message}")
    if check:
        check_proto(proto, where)
    bad_types = type_errors(graph)
    if bad_types:
        raise ModelError(f"{where}: {bad_types[0]}")
    if shapes:
        fix_shapes(graph, shapes, where)
    graph.diagnostics = weight_diagnostics(graph) + infer_shapes(graph)
    graph.source_path = where
    return graph


_ASIDE_DOMAIN = "npu_studio.not_in_onnx"


def _with_foreign_ops_aside(proto: ModelProto) -> ModelProto:
    """``proto`` for the checker, with default-domain nodes whose op onnx does not define moved
    to a domain of their own: onnxruntime registers SimplifiedLayerNormalization there, and an op
    nobody knows should load so that ``inspect`` lists it and running it names it. Everything
    else is checked as written."""
    version = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if version is None:
        return proto
    foreign = [n for n in _all_nodes(proto.graph) if n.domain in ("", "ai.onnx")
               and not onnx.defs.has(n.op_type, "")]
    if not foreign:
        return proto
    copy = ModelProto()
    copy.CopyFrom(proto)
    for n in _all_nodes(copy.graph):
        if n.domain in ("", "ai.onnx") and not onnx.defs.has(n.op_type, ""):
            n.domain = _ASIDE_DOMAIN
    copy.opset_import.add(domain=_ASIDE_DOMAIN, version=1)
    return copy


def _all_nodes(g: onnx.GraphProto):
    for n in g.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    yield from _all_nodes(sub)


def weight_diagnostics(graph: Graph) -> list[Diagnostic]:
    """Warnings for float initializers holding NaN or infinite values (legal, rarely intended)."""
    out = []
    for name, v in graph.initializers.items():
        arr = v.const
        if arr is None or arr.dtype.kind != "f" or arr.size == 0:
            continue
        finite = np.isfinite(arr.astype(np.float32, copy=False)) if arr.dtype.itemsize < 4 else np.isfinite(arr)
        bad = int(arr.size - np.count_nonzero(finite))
        if bad:
            users = ", ".join(sorted({n.name for n, _ in v.uses()})[:3]) or "nothing"
            out.append(Diagnostic(WARNING, None, "non-finite-weights",
                                  f"initializer {name!r} holds {bad} NaN or infinite value(s) (read by {users})"))
    return out
