"""Project files (``*.npuproj``): a model, the edits made to it and the settings around it.

A project is JSON with a format version::

    {"format": "npu-studio-project", "version": 1,
     "model": {"path": "mobilenet.onnx", "sha256": "..."},      # path relative to the project
     "target": "phone-npu", "passes": {"fuse_gelu": false, ...},
     "quantization": {"method": "entropy", "per_channel": true, "symmetric": false, "dtype": "int8",
                      "percentile": 99.99, "reduce_range": false, "calibration": "calib.npz"},
     "pins": {"node name": "cpu"}, "shapes": {"input": [1, 3, 224, 224]},
     "edits": {"removed": [...], "added": [...], "inputs": {...}, "attrs": {...},
               "input_types": {...}}}

``edits`` is a structural diff against the model file (nodes removed and added, inputs
rewired, attributes changed, graph input types changed), so the project stays small and
readable and the model file is never rewritten. Saving is atomic (temporary file in the same
folder, fsync, rename). A project of a newer format version is refused with a clear error; an
older one is migrated. The editor's crash-recovery file is a project too.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import InputError
from engine.ir.graph import Graph, Node
from engine.outputs import atomic_write
from nodes.types import TensorType, dtype_name

FORMAT = "npu-studio-project"
VERSION = 1
SUFFIX = ".npuproj"
MAX_PROJECT_BYTES = 64 * 2**20  # edits may carry tensors; far above any project saved by hand


class ProjectError(InputError):
    """A project file that cannot be used (names the file and the problem in one line)."""


@dataclass
class Project:
    """The contents of a project file (paths absolute once loaded)."""

    model_path: Path
    model_sha256: str = ""
    target: str | None = None
    passes: dict[str, Any] = field(default_factory=dict)
    quantization: dict[str, Any] = field(default_factory=dict)
    pins: dict[str, str] = field(default_factory=dict)
    shapes: dict[str, list[int]] = field(default_factory=dict)
    edits: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # The model's structure before the edits (set by open_project; never saved).
    base: Fingerprint | None = field(default=None, repr=False, compare=False)


# -- files -------------------------------------------------------------------------------------
def sha256_of(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save_project(path: str | os.PathLike, project: Project) -> None:
    """Write a project file atomically (the model path is stored relative to it when possible)."""
    path = Path(path)
    model = Path(project.model_path)
    try:
        rel = os.path.relpath(model.resolve(), path.resolve().parent)
    except ValueError:  # another drive on Windows
        rel = str(model.resolve())
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "model": {"path": Path(rel).as_posix(), "sha256": project.model_sha256},
        "target": project.target,
        "passes": project.passes,
        "quantization": project.quantization,
        "pins": dict(sorted(project.pins.items())),
        "shapes": project.shapes,
        "edits": project.edits,
        **project.extra,
    }
    atomic_write(path, (json.dumps(doc, indent=2, sort_keys=False) + "\n").encode("utf-8"))


def _migrate_v0(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 0 (pre-release) kept the model path as a plain string under "model" and the pins
    as a list of [name, device] pairs."""
    out = dict(doc)
    if isinstance(out.get("model"), str):
        out["model"] = {"path": out["model"], "sha256": ""}
    if isinstance(out.get("pins"), list):
        out["pins"] = {str(k): str(v) for k, v in out["pins"]}
    out["version"] = 1
    return out


_MIGRATIONS = {0: _migrate_v0}


def load_project(path: str | os.PathLike) -> Project:
    """Read a project file; raises ProjectError naming the file and the problem."""
    path = Path(path)
    from engine.limits import parse_document, read_document

    if not path.exists():
        raise ProjectError(f"{path}: no such file")
    try:
        text = read_document(path, "project file", MAX_PROJECT_BYTES)
        doc = parse_document(text, str(path), "project file", json.loads, prescan=False)  # json guards recursion
    except json.JSONDecodeError as exc:
        raise ProjectError(f"{path}: not a project file (invalid or truncated JSON at line {exc.lineno})") from None
    except InputError as exc:
        raise ProjectError(str(exc)) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ProjectError(f"{path}: not an NPU Studio project (missing \"format\": \"{FORMAT}\")")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ProjectError(f"{path}: field version: expected an integer")
    if version > VERSION:
        raise ProjectError(f"{path}: project format version {version} is newer than this NPU Studio "
                           f"understands (up to {VERSION}); update NPU Studio")
    while version < VERSION:
        migrate = _MIGRATIONS.get(version)
        if migrate is None:
            raise ProjectError(f"{path}: project format version {version} is too old to migrate")
        try:
            doc = migrate(doc)
        except (TypeError, ValueError, AttributeError):
            raise ProjectError(f"{path}: project format version {version} cannot be migrated "
                               "(fields model or pins are malformed)") from None
        version = doc["version"]
    model = doc.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("path"), str) or not model["path"]:
        raise ProjectError(f"{path}: field model.path: expected the path of the .onnx file")
    from engine.project_schema import check_project_fields

    check_project_fields(doc, str(path), ProjectError)
    target = doc.get("target")
    if target is not None and not isinstance(target, str):
        raise ProjectError(f"{path}: field target: expected a target name or path")
    model_path = Path(model["path"])
    if not model_path.is_absolute():
        model_path = (path.resolve().parent / model_path).resolve()
    known = {"format", "version", "model", "target", "passes", "quantization", "pins", "shapes", "edits"}
    return Project(model_path, str(model.get("sha256") or ""), target, dict(doc.get("passes") or {}),
                   dict(doc.get("quantization") or {}), {str(k): str(v) for k, v in (doc.get("pins") or {}).items()},
                   {str(k): [int(d) for d in v] for k, v in (doc.get("shapes") or {}).items()},
                   dict(doc.get("edits") or {}), {k: v for k, v in doc.items() if k not in known})


def open_project(path: str | os.PathLike, check_hash: bool = True) -> tuple[Graph, Project]:
    """Load a project's model, apply its edits and pins; returns (graph, project)."""
    from engine.loader import load

    project = load_project(path)
    if not project.model_path.is_file():
        raise ProjectError(f"{path}: model {project.model_path} does not exist")
    if check_hash and project.model_sha256 and sha256_of(project.model_path) != project.model_sha256:
        raise ProjectError(f"{path}: model {project.model_path.name} changed since the project was saved "
                           "(its SHA-256 differs); its edits may no longer apply")
    graph = load(project.model_path, shapes={k: tuple(v) for k, v in project.shapes.items()} or None)
    project.base = fingerprint(graph)
    try:
        apply_edits(graph, project.edits)
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise ProjectError(f"{path}: edits do not apply to {project.model_path.name}: {exc}") from None
    for name, dev in project.pins.items():
        node = graph.node_by_name(name)
        if node is None:
            raise ProjectError(f"{path}: field pins: no node named {name!r}")
        if dev not in ("npu", "cpu"):
            raise ProjectError(f"{path}: field pins.{name}: device must be npu or cpu, not {dev!r}")
        node.meta["pin"] = dev
    return graph, project


# -- structural diff ---------------------------------------------------------------------------
def _encode(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        arr = np.ascontiguousarray(value)
        return {"tensor": base64.b64encode(arr.tobytes()).decode("ascii"), "dtype": arr.dtype.str,
                "shape": list(arr.shape)}
    if isinstance(value, Graph):
        raise ValueError("subgraph attributes cannot be stored as edits")
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "tensor" in value:
        arr = np.frombuffer(base64.b64decode(value["tensor"]), dtype=np.dtype(value["dtype"]))
        return arr.reshape(value["shape"]).copy()
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and \
            a.shape == b.shape and bool(np.array_equal(a, b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b if not isinstance(a, Graph) else a is b


def _type_doc(t: TensorType) -> dict[str, Any]:
    return {"dtype": dtype_name(t.dtype) if t.dtype is not None else None,
            "shape": None if t.shape is None else list(t.shape)}


def _type_from_doc(doc: Mapping[str, Any]) -> TensorType:
    dt = doc.get("dtype")
    shape = doc.get("shape")
    return TensorType(np.dtype(dt) if dt else None, None if shape is None else tuple(shape))


@dataclass
class Fingerprint:
    """The structure of a graph as loaded, to diff edits against (references, no copies)."""

    nodes: dict[str, tuple[str, str, tuple[str, ...], tuple[str, ...], dict[str, Any]]]
    input_types: dict[str, TensorType]


def fingerprint(graph: Graph) -> Fingerprint:
    """Record a graph's structure (cheap: names and references to attribute values)."""
    nodes = {}
    for n in graph.nodes:
        nodes[n.name] = (n.op_type, n.domain, tuple(v.name if v is not None else "" for v in n.inputs),
                         tuple(v.name if v is not None else "" for v in n.outputs), dict(n.attrs))
    return Fingerprint(nodes, {v.name: v.type for v in graph.inputs})


def edits_since(base: Fingerprint, graph: Graph) -> dict[str, Any]:
    """The structural diff from ``base`` to ``graph`` (the "edits" of a project)."""
    current = {n.name: n for n in graph.nodes}
    removed = [name for name in base.nodes if name not in current]
    added: list[dict[str, Any]] = []
    inputs: dict[str, list[str]] = {}
    attrs: dict[str, dict[str, Any]] = {}
    for name, n in current.items():
        ins = [v.name if v is not None else "" for v in n.inputs]
        old = base.nodes.get(name)
        if old is None or old[0] != n.op_type or old[1] != n.domain:
            if old is not None:
                removed.append(name)
            added.append({"name": name, "op_type": n.op_type, "domain": n.domain, "inputs": ins,
                          "outputs": [v.name if v is not None else "" for v in n.outputs],
                          "attrs": {k: _encode(v) for k, v in sorted(n.attrs.items())}})
            continue
        if tuple(ins) != old[2]:
            inputs[name] = ins
        changed = {k: _encode(v) for k, v in n.attrs.items() if k not in old[4] or not _same(old[4][k], v)}
        changed.update({k: None for k in old[4] if k not in n.attrs})
        if changed:
            attrs[name] = changed
    input_types = {v.name: _type_doc(v.type) for v in graph.inputs
                   if v.name in base.input_types and base.input_types[v.name] != v.type}
    out: dict[str, Any] = {}
    for key, val in (("removed", removed), ("added", added), ("inputs", inputs), ("attrs", attrs),
                     ("input_types", input_types)):
        if val:
            out[key] = val
    return out


def apply_edits(graph: Graph, edits: Mapping[str, Any]) -> None:
    """Replay a structural diff on a freshly loaded graph (through Graph/Node methods)."""
    if not edits:
        return
    for name in edits.get("removed", []):
        node = graph.node_by_name(name)
        if node is None:
            raise KeyError(f"removed node {name!r} is not in the model")
        graph.remove_node(node)
    created: list[tuple[Node, list[str]]] = []
    for rec in edits.get("added", []):
        attrs = {k: _decode(v) for k, v in rec.get("attrs", {}).items() if v is not None}
        outs = [o for o in rec.get("outputs", [])]
        node = graph.make_node(rec["op_type"], [], len(outs) or 1, attrs, name=rec["name"],
                               domain=rec.get("domain", ""), output_names=[o or "unused" for o in outs] or None)
        if node.name != rec["name"]:
            raise ValueError(f"added node {rec['name']!r} clashes with an existing name")
        created.append((node, rec.get("inputs", [])))
    for node, ins in created:
        _wire(graph, node, ins)
    for name, ins in edits.get("inputs", {}).items():
        node = graph.node_by_name(name)
        if node is None:
            raise KeyError(f"rewired node {name!r} is not in the model")
        _wire(graph, node, ins)
    for name, changes in edits.get("attrs", {}).items():
        node = graph.node_by_name(name)
        if node is None:
            raise KeyError(f"node {name!r} with changed attributes is not in the model")
        for key, val in changes.items():
            kind = node.attr_types.get(key)
            node.set_attr(key, None if val is None else _decode(val))
            if val is not None and kind is not None:
                node.attr_types[key] = kind
    by_name = {v.name: v for v in graph.inputs}
    for name, doc in edits.get("input_types", {}).items():
        if name not in by_name:
            raise KeyError(f"graph input {name!r} is not in the model")
        by_name[name].type = _type_from_doc(doc)
    from engine.ir.infer import infer_shapes

    graph.diagnostics = infer_shapes(graph)


def _wire(graph: Graph, node: Node, names: list[str]) -> None:
    values = []
    for name in names:
        if not name:
            values.append(None)
            continue
        v = graph.lookup(name)
        if v is None:
            raise KeyError(f"node {node.name!r} reads {name!r}, which is not in the graph")
        values.append(v)
    node.set_inputs(values)
