"""The sweep spec (SPEC.yaml): models x hardware configurations x quantization settings.

```yaml
models:                       # paths are relative to the spec file
  - path: digits_cnn.onnx
    shapes: {x: [1, 1, 8, 8]}   # optional, fixes dynamic dimensions
    calib: digits_calib.npz     # .npz or a folder of images / .npy files
    calib_samples: 64           # optional: use the first N samples
    eval: digits_eval.npz       # optional held-out data for the error figures (default: calib)
    eval_samples: 16            # optional (default 16)
targets:
  - phone-npu                   # a bundled name or a YAML path
  - name: ethos-u55             # (or path: my_npu.yaml)
    vary: {npu.sram_kib: [256, 2048], npu.clock_mhz: [500, 1000]}
quant:
  - {method: minmax}
  - {method: percentile, per_channel: true, dtype: int8, target_sqnr: 30}
shard_samples: 32             # optional: calibration samples per task (default 32)
```

Every problem is an InputError ``SPEC: field PATH: what is wrong``; a ``vary:`` value is applied
to the target's own YAML document and validated by the target schema (engine.hw.target), so an
unknown field or a value of the wrong type is named the same way a target file would name it.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from engine.errors import InputError
from engine.hw.schema import Field
from engine.hw.target import SCHEMA, HardwareTarget, bundled_targets, target_from_dict
from engine.quant.observers import METHODS

DTYPES = ("int8", "uint8", "int16")
QUANT_KEYS = ("method", "per_channel", "symmetric", "dtype", "target_sqnr")
MODEL_KEYS = ("path", "shapes", "calib", "calib_samples", "eval", "eval_samples")
TOP_KEYS = ("models", "targets", "quant", "shard_samples")


def file_sha256(path: Path) -> str:
    """sha256 of a file, or of a folder's file names and contents (image / .npy folders)."""
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for p in files:
        if p != path:
            h.update(str(p.relative_to(path)).encode())
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class ModelSpec:
    """One model of the sweep with its data (absolute paths)."""

    path: str
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    calib: str
    calib_samples: int | None
    eval: str | None
    eval_samples: int
    sha256: str
    data_sha256: str

    @property
    def name(self) -> str:
        """The model's file name without the suffix."""
        return Path(self.path).stem

    @property
    def key(self) -> str:
        """Identity of the model with its data (file contents, not paths)."""
        doc = {"model": self.sha256, "shapes": self.shapes, "data": self.data_sha256,
               "calib_samples": self.calib_samples, "eval_samples": self.eval_samples}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TargetVariant:
    """One hardware configuration: a base target with some fields changed."""

    base: str
    varied: tuple[tuple[str, Any], ...]
    doc: dict = field(hash=False, compare=False)

    @property
    def label(self) -> str:
        """``phone-npu`` or ``phone-npu npu.sram_kib=256``."""
        return " ".join([self.base, *(f"{k}={v}" for k, v in self.varied)])

    @property
    def key(self) -> str:
        """Identity of the effective target document."""
        return hashlib.sha256(json.dumps(self.doc, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def target(self) -> HardwareTarget:
        """The validated HardwareTarget."""
        return target_from_dict(copy.deepcopy(self.doc), self.label)


@dataclass(frozen=True)
class QuantSetting:
    """One quantization setting of the sweep."""

    method: str = "minmax"
    per_channel: bool = False
    symmetric: bool = False
    dtype: str = "int8"
    target_sqnr: float | None = None

    def to_json(self) -> dict:
        """JSON-ready (also the identity of the setting in point keys)."""
        return {"method": self.method, "per_channel": self.per_channel, "symmetric": self.symmetric,
                "dtype": self.dtype, "target_sqnr": self.target_sqnr}


@dataclass(frozen=True)
class Point:
    """One model on one hardware configuration with one quantization setting."""

    model: ModelSpec
    target: TargetVariant
    quant: QuantSetting

    @property
    def key(self) -> str:
        """The resume key: a hash of the model file and data, the target and the settings."""
        doc = {"model": self.model.key, "target": self.target.key, "quant": self.quant.to_json()}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]


@dataclass(frozen=True)
class SweepSpec:
    """A parsed, validated spec."""

    source: str
    models: tuple[ModelSpec, ...]
    targets: tuple[TargetVariant, ...]
    quant: tuple[QuantSetting, ...]
    shard_samples: int = 32

    @property
    def varied_fields(self) -> list[str]:
        """Every target field some variant varies, in first-seen order (one CSV column each)."""
        seen: dict[str, None] = {}
        for t in self.targets:
            for k, _ in t.varied:
                seen[k] = None
        return list(seen)

    def points(self) -> list[Point]:
        """The product models x targets x quant settings."""
        return [Point(m, t, q) for m, t, q in itertools.product(self.models, self.targets, self.quant)]


# -- parsing ---------------------------------------------------------------------------------------
def _fail(where: str, path: str, message: str) -> InputError:
    return InputError(f"{where}: field {path}: {message}")


def _unknown(where: str, path: str, key: Any, known: tuple[str, ...]) -> InputError:
    close = difflib.get_close_matches(str(key), known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
    return _fail(where, f"{path}.{key}" if path else str(key), f"unknown field ({hint})")


def _mapping(doc: Any, where: str, path: str, known: tuple[str, ...]) -> dict:
    if not isinstance(doc, dict):
        raise _fail(where, path, f"expected a mapping, got {type(doc).__name__}")
    for k in doc:
        if k not in known:
            raise _unknown(where, path, k, known)
    return doc


def _list(doc: Any, where: str, path: str) -> list:
    if doc is None:
        raise _fail(where, path, "missing (required: a non-empty list)")
    if not isinstance(doc, list):
        raise _fail(where, path, f"expected a list, got {type(doc).__name__}")
    if not doc:
        raise _fail(where, path, "empty list: the sweep would have no points")
    return doc


def _count(value: Any, where: str, path: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _fail(where, path, f"expected a positive integer, got {value!r}")
    return value


def _existing(base: Path, value: Any, where: str, path: str) -> Path:
    if not isinstance(value, str) or not value:
        raise _fail(where, path, f"expected a path, got {value!r}")
    p = (base / value).resolve()
    if not p.exists():
        raise _fail(where, path, f"{value}: no such file or folder")
    return p


def _parse_model(doc: Any, base: Path, where: str, path: str) -> ModelSpec:
    d = _mapping({"path": doc} if isinstance(doc, str) else doc, where, path, MODEL_KEYS)
    if "path" not in d:
        raise _fail(where, f"{path}.path", "missing (required: the .onnx file)")
    model = _existing(base, d["path"], where, f"{path}.path")
    if not model.is_file():
        raise _fail(where, f"{path}.path", f"{d['path']}: not a file")
    if "calib" not in d:
        raise _fail(where, f"{path}.calib", "missing (required: calibration data, .npz or a folder)")
    calib = _existing(base, d["calib"], where, f"{path}.calib")
    ev = _existing(base, d["eval"], where, f"{path}.eval") if d.get("eval") is not None else None
    shapes = d.get("shapes") or {}
    if not isinstance(shapes, dict):
        raise _fail(where, f"{path}.shapes", "expected a mapping input name -> list of dimensions")
    fixed = []
    for name, dims in shapes.items():
        if not isinstance(dims, list) or not dims or not all(isinstance(x, int) and x > 0 for x in dims):
            raise _fail(where, f"{path}.shapes.{name}", f"expected a list of positive integers, got {dims!r}")
        fixed.append((str(name), tuple(dims)))
    calib_samples = _count(d["calib_samples"], where, f"{path}.calib_samples") if d.get("calib_samples") else None
    eval_samples = _count(d.get("eval_samples", 16), where, f"{path}.eval_samples")
    data_sha = hashlib.sha256((file_sha256(calib) + (file_sha256(ev) if ev else "")).encode()).hexdigest()
    return ModelSpec(str(model), tuple(sorted(fixed)), str(calib), calib_samples, str(ev) if ev else None,
                     eval_samples, file_sha256(model), data_sha)


def _schema_field(dotted: str) -> Field | None:
    node: Any = SCHEMA
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, Field) else None


def _leaf_fields(schema: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in schema.items():
        out.extend(_leaf_fields(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"])
    return out


def _set_dotted(doc: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = doc
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _base_target_doc(doc: Any, base: Path, where: str, path: str) -> tuple[str, dict]:
    if isinstance(doc, dict):
        _mapping(doc, where, path, ("name", "path", "vary"))
        ref = doc.get("path") or doc.get("name")
        if not ref:
            raise _fail(where, path, "give the target's bundled name or the path of its YAML file")
        is_path = "path" in doc
    else:
        ref, is_path = doc, False
    if not isinstance(ref, str):
        raise _fail(where, path, f"expected a target name or path, got {ref!r}")
    bundled = bundled_targets()
    if not is_path and ref in bundled:
        file = bundled[ref]
    else:
        file = (base / ref).resolve()
        if not file.is_file():
            raise _fail(where, path, f"{ref}: no bundled target of that name and no such file "
                        f"(bundled: {', '.join(bundled)})")
    try:
        tdoc = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise _fail(where, path, f"{file}: cannot read the target: {str(exc).splitlines()[0]}") from None
    target_from_dict(copy.deepcopy(tdoc), str(file))  # the base target itself must be valid
    name = tdoc.get("name", Path(ref).stem) if isinstance(tdoc, dict) else Path(ref).stem
    return str(name), tdoc


def _parse_target(doc: Any, base: Path, where: str, path: str) -> list[TargetVariant]:
    name, tdoc = _base_target_doc(doc, base, where, path)
    vary = doc.get("vary") if isinstance(doc, dict) else None
    if vary is None:
        return [TargetVariant(name, (), tdoc)]
    if not isinstance(vary, dict) or not vary:
        raise _fail(where, f"{path}.vary", "expected a non-empty mapping FIELD: [values]")
    axes = []
    known = _leaf_fields(SCHEMA)
    for fname, values in vary.items():
        fpath = f"{path}.vary.{fname}"
        if not isinstance(fname, str) or _schema_field(fname) is None:
            close = difflib.get_close_matches(str(fname), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _fail(where, fpath, f"unknown target field {fname!r}{hint}")
        if not isinstance(values, list):
            values = [values]
        if not values:
            raise _fail(where, fpath, "empty grid: give at least one value")
        axes.append([(fname, v) for v in values])
    out = []
    for combo in itertools.product(*axes):
        d = copy.deepcopy(tdoc)
        for fname, v in combo:
            _set_dotted(d, fname, v)
        variant = TargetVariant(name, tuple(combo), d)
        try:
            variant.target()
        except InputError as exc:  # the target schema names the field and the problem
            raise InputError(f"{where}: {path}.vary: {exc}") from None
        out.append(variant)
    return out


def _parse_quant(doc: Any, where: str, path: str) -> QuantSetting:
    d = _mapping(doc or {}, where, path, QUANT_KEYS)
    method = d.get("method", "minmax")
    if method not in METHODS:
        raise _fail(where, f"{path}.method", f"must be one of {', '.join(METHODS)}, got {method!r}")
    dtype = d.get("dtype", "int8")
    if dtype not in DTYPES:
        raise _fail(where, f"{path}.dtype", f"must be one of {', '.join(DTYPES)}, got {dtype!r}")
    flags = {}
    for k in ("per_channel", "symmetric"):
        v = d.get(k, False)
        if not isinstance(v, bool):
            raise _fail(where, f"{path}.{k}", f"expected true or false, got {v!r}")
        flags[k] = v
    sq = d.get("target_sqnr")
    if sq is not None and (not isinstance(sq, (int, float)) or isinstance(sq, bool)):
        raise _fail(where, f"{path}.target_sqnr", f"expected a number of dB, got {sq!r}")
    return QuantSetting(method, flags["per_channel"], flags["symmetric"], dtype,
                        None if sq is None else float(sq))


def parse_spec(doc: Any, where: str, base: Path) -> SweepSpec:
    """Validate a parsed SPEC document (``base``: the folder relative paths start from)."""
    d = _mapping(doc, where, "", TOP_KEYS) if isinstance(doc, dict) else None
    if d is None:
        raise InputError(f"{where}: expected a mapping with models, targets and quant")
    models = [_parse_model(m, base, where, f"models[{i}]") for i, m in enumerate(_list(d.get("models"), where, "models"))]
    targets = [v for i, t in enumerate(_list(d.get("targets"), where, "targets"))
               for v in _parse_target(t, base, where, f"targets[{i}]")]
    quant = [_parse_quant(q, where, f"quant[{i}]") for i, q in enumerate(_list(d.get("quant"), where, "quant"))]
    shard = _count(d.get("shard_samples", 32), where, "shard_samples")
    spec = SweepSpec(where, tuple(models), tuple(targets), tuple(quant), shard)
    keys = [p.key for p in spec.points()]
    if len(set(keys)) != len(keys):
        raise InputError(f"{where}: two points are identical (a model, target or setting is listed twice)")
    return spec


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate SPEC.yaml."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{path}: no such spec file")
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"{path}: not valid YAML{line}") from None
    return parse_spec(doc, str(path), p.resolve().parent)
