"""Fuzzing every input that is not a model: project files, option values, image folders,
calibration .npz, target YAML, output paths, and extreme numbers in weights and data.

A case is (family, seed). It writes its files into a fresh folder, runs one ``npu-studio``
command in-process and judges what a user would see:

``ok``            exit 0 and every output valid (QDQ scales finite and positive, files readable)
``clean-error``   exit 2, exactly one ``error:`` line, no traceback, nothing new written
``INTERNAL``      exit 1: an internal error (a bug of ours) on input a user supplied
``INVALID``       exit 0 with an invalid output
``LEFT-BEHIND``   exit 2 with a new file left in the case's folder
``BAD-MESSAGE``   exit 2 but not one ``error:`` line, a traceback, or a file's content echoed
``TIMEOUT``       longer than the per-case budget

Only ``ok`` and ``clean-error`` keep the promise.
"""

from __future__ import annotations

import json
import shutil
import signal
import struct
import tempfile
import time
import zlib
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from engine.cli import Out, main
from tests.hostile.make_corpus import X_SHAPE, _conv_model

GOOD = ("ok", "clean-error")
SECRET_MARK = "SECRET-c0ffee-LINE"  # in files that are not what they claim; never to be echoed
EXTREMES = [np.inf, -np.inf, np.nan, 3e38, -3e38, 1e-42, -1e-45, 0.0, -0.0, 1e30, 65504.0, 1e-30]
ASSETS = Path(__file__).resolve().parents[2] / "assets"


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout


class Case:
    """One command over files written into ``work``; ``check`` validates an exit-0 output."""

    def __init__(self, argv: list, check: Callable[[Path], str | None] | None = None) -> None:
        self.argv = [str(a) for a in argv]
        self.check = check


# -- shared fixtures ------------------------------------------------------------------------------
def _base(work: Path) -> Path:
    """The small legal model every case starts from (Conv 3->3 + Relu on 1x3x8x8)."""
    p = work / "conv.onnx"
    if not p.exists():
        onnx.save(_conv_model(), p)
    return p


def _calib(work: Path, rng: np.random.Generator, n: int = 2) -> Path:
    p = work / "calib.npz"
    np.savez(p, x=rng.random((n, *X_SHAPE), dtype=np.float32))
    return p


def _valid_qdq(path: Path) -> str | None:
    if not path.is_file():
        return f"{path.name} was not written"
    m = onnx.load(path)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.input[1] in inits:
            s = inits[n.input[1]].astype(np.float64)
            if not (np.all(np.isfinite(s)) and np.all(s >= np.finfo(np.float32).tiny)):
                return f"{n.name}: scale {s.ravel()[:4]}"
    return None


def _valid_files(*names: str) -> Callable[[Path], str | None]:
    def check(work: Path) -> str | None:
        for name in names:
            p = work / name
            if not p.is_file() or p.stat().st_size == 0:
                return f"{name} missing or empty"
            if name.endswith(".onnx") and "q" in name:
                bad = _valid_qdq(p)
                if bad:
                    return bad
            if name.endswith(".json"):
                json.loads(p.read_text())
        return None

    return check


def _pick(rng: np.random.Generator, items: list):
    return items[int(rng.integers(0, len(items)))]


# -- project files --------------------------------------------------------------------------------
def _project_case(work: Path, rng: np.random.Generator) -> Case:
    model = _base(work)
    doc: dict = {"format": "npu-studio-project", "version": 1, "model": {"path": str(model)}, "target": "phone-npu"}
    junk = [5, -1, 2**70, "a", None, True, [], {}, [None], ["a"], [1, -3], [1e308], float("nan"), "x" * 300,
            [[[]]], {"k": {"k": []}}, 3.5]
    fields = ["shapes", "pins", "passes", "quantization", "edits", "target", "model", "version", "format"]
    kind = int(rng.integers(0, 8))
    if kind == 0:  # a field of the wrong type
        doc[_pick(rng, fields)] = _pick(rng, junk)
    elif kind == 1:  # a sub-field of the wrong type
        f = _pick(rng, ["shapes", "pins", "passes", "quantization", "edits"])
        sub = {"shapes": "x", "pins": "conv", "passes": "fuse_gelu",
               "quantization": _pick(rng, ["method", "dtype", "percentile", "per_channel", "calibration"]),
               "edits": _pick(rng, ["removed", "added", "inputs", "attrs", "input_types"])}[f]
        doc[f] = {sub: _pick(rng, junk)}
    elif kind == 2:  # deep nesting
        depth = int(_pick(rng, [70, 1000, 100_000]))
        text = json.dumps(doc)[:-1] + ', "edits": ' + "[" * depth + "]" * depth + "}"
        (work / "p.npuproj").write_text(text)
    elif kind == 3:  # truncated or flipped bytes
        text = json.dumps(doc).encode()
        cut = int(rng.integers(0, len(text)))
        (work / "p.npuproj").write_bytes(text[:cut] if rng.random() < 0.5 else
                                         text[:cut] + bytes([int(rng.integers(0, 256))]) + text[cut + 1:])
    elif kind == 4:  # not a project at all, with content that must never be echoed
        (work / "p.npuproj").write_text(f"{SECRET_MARK}\n" * 5 + "{not json")
    elif kind == 5:  # edits that reference nothing / decode badly
        doc["edits"] = _pick(rng, [{"removed": ["nowhere"]}, {"added": [{"name": "n", "op_type": "Relu",
                                                                          "attrs": {"a": {"tensor": "!!", "dtype": "zz",
                                                                                          "shape": [1]}}}]},
                                   {"inputs": {"conv": ["ghost"]}}, {"input_types": {"x": {"dtype": "bogus"}}},
                                   {"attrs": {"conv": {"pads": [2**62] * 4}}}])
    elif kind == 6:  # a legal project with odd but valid settings
        doc["quantization"] = {"method": _pick(rng, ["minmax", "percentile", "entropy", "mse"]),
                               "per_channel": bool(rng.integers(0, 2))}
        doc["pins"] = {"conv": _pick(rng, ["npu", "cpu"])}
    else:  # a shapes entry that is out of range
        doc["shapes"] = {"x": [int(d) for d in rng.choice([-1, 0, 1, 3, 8, 2**31, 2**40], 4)]}
    p = work / "p.npuproj"
    if not p.exists():
        p.write_text(json.dumps(doc))
    return Case(["compile", p, "-o", work / "bundle", "--allow-synthetic-calibration", "--quiet",
                 "--analysis-samples", "1"], _valid_files("bundle/model.qdq.onnx", "bundle/manifest.json"))


# -- option values --------------------------------------------------------------------------------
_NUMBERS = ["0", "-1", "1", "3", "nan", "inf", "-inf", "1e9", "1000000000", "1e-300", "2.5", "abc", "", "1,2",
            "99999999999999999999", "0x10", "-0"]


def _option_case(work: Path, rng: np.random.Generator) -> Case:
    model = _base(work)
    cmd = _pick(rng, ["simulate", "quantize", "optimize", "compile"])
    opt_values = lambda opts: [x for o in opts for x in (o, _pick(rng, _NUMBERS))]  # noqa: E731
    n = int(rng.integers(1, 3))
    if cmd == "simulate":
        opts = list(rng.choice(["--stream", "--thermal", "--queue", "--fps"], n, replace=False))
        extra = ["--stream", "5"] if "--stream" not in opts and ("--queue" in opts or "--fps" in opts) else []
        return Case(["simulate", model, "--target", "phone-npu", *extra, *opt_values(opts)])
    if cmd == "quantize":
        calib = _calib(work, rng)
        images = rng.random() < 0.3
        if images:
            calib = _images(work, rng, ok=True)
        opts = list(rng.choice(["--scale", "--percentile", "--max-samples", "--analysis-samples", "--resize", "--mean",
                                "--std", "--target-sqnr", "--target-cosine"], n, replace=False))
        values = []
        for o in opts:
            v = _pick(rng, _NUMBERS)
            if o in ("--resize", "--mean", "--std") and rng.random() < 0.6:
                v = ",".join(_pick(rng, ["0", "1", "8", "30000", "nan", "-2", "0.5"]) for _ in range(int(rng.integers(1, 4))))
            values += [o, v]
        return Case(["quantize", model, "--calib", calib, "-o", work / "q.onnx", "--quiet", *values],
                    _valid_files("q.onnx"))
    if cmd == "optimize":
        opts = ["--max-fold-mb", _pick(rng, _NUMBERS)] if rng.random() < 0.5 else \
            ["--disable", _pick(rng, ["bogus", "fold_constants", "x" * 200, "", ",", "fuse_gelu,nope"])]
        return Case(["optimize", model, "-o", work / "o.onnx", *opts], _valid_files("o.onnx"))
    opts = ["--disable", _pick(rng, ["bogus", "fold_constants", "fuse_bn"])] if rng.random() < 0.5 else \
        ["--analysis-samples", _pick(rng, _NUMBERS)]
    return Case(["compile", model, "--target", "phone-npu", "--allow-synthetic-calibration", "--quiet",
                 "-o", work / "bundle", *opts], _valid_files("bundle/model.qdq.onnx"))


# -- image folders --------------------------------------------------------------------------------
def _png_header(path: Path, w: int, h: int, body: bytes = b"\0" * 64) -> None:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(body)) + chunk(b"IEND", b""))


def _images(work: Path, rng: np.random.Generator, ok: bool = False) -> Path:
    from PIL import Image

    folder = work / "images"
    folder.mkdir(exist_ok=True)
    for k in range(int(rng.integers(1, 4))):
        f = folder / f"{k}.{_pick(rng, ['png', 'jpg', 'bmp'])}"
        kind = 0 if ok else int(rng.integers(0, 8))
        size = (int(rng.integers(1, 40)), int(rng.integers(1, 40)))
        if kind == 0:
            mode = _pick(rng, ["RGB", "L", "RGBA", "P", "I", "1"]) if not ok else "RGB"
            im = Image.fromarray((rng.random((size[1], size[0], 3)) * 255).astype(np.uint8)).convert(mode)
            fmt = {"png": "PNG", "jpg": "JPEG", "bmp": "BMP"}[f.suffix[1:]]
            try:
                im.save(f, format=fmt)
            except (OSError, ValueError, KeyError):  # a mode this format cannot hold
                im.convert("RGB").save(f, format=fmt)
        elif kind == 1:  # a header claiming a huge image
            _png_header(folder / f"{k}.png", int(_pick(rng, [100_000, 2**31 - 1, 20_000])),
                        int(_pick(rng, [100_000, 1, 20_000])))
        elif kind == 2:  # truncated
            im = Image.fromarray((rng.random((16, 16, 3)) * 255).astype(np.uint8))
            im.save(f, format="PNG")
            f.write_bytes(f.read_bytes()[: int(rng.integers(1, 60))])
        elif kind == 3:  # not an image
            f.write_text(f"{SECRET_MARK} plain text\n")
        elif kind == 4:  # empty
            f.write_bytes(b"")
        elif kind == 5:  # a folder named like an image, or a dangling symlink
            if rng.random() < 0.5:
                (folder / f"d{k}.png").mkdir()
            else:
                (folder / f"l{k}.png").symlink_to(work / "nowhere.png")
        elif kind == 6:  # random bytes behind a valid signature
            f.write_bytes(b"\x89PNG\r\n\x1a\n" + rng.bytes(int(rng.integers(0, 200))))
        else:  # zero-sized dimension claimed
            _png_header(folder / f"{k}.png", 0, 5)
    return folder


def _image_case(work: Path, rng: np.random.Generator) -> Case:
    model = _base(work)
    folder = _images(work, rng)
    extra = []
    if rng.random() < 0.3:
        extra += ["--channels", _pick(rng, ["RGB", "BGR", "GRAY"])]
    if rng.random() < 0.2:
        extra += ["--layout", "NHWC"]
    return Case(["quantize", model, "--calib", folder, "-o", work / "q.onnx", "--quiet", "--analysis-samples", "1",
                 *extra], _valid_files("q.onnx"))


# -- calibration .npz -----------------------------------------------------------------------------
def _npz_case(work: Path, rng: np.random.Generator) -> Case:
    import zipfile

    model = _base(work)
    p = work / "c.npz"
    kind = int(rng.integers(0, 8))
    n = int(rng.integers(1, 4))
    if kind == 0:  # wrong dtype
        dt = _pick(rng, [np.float16, np.float64, np.int8, np.uint8, np.int64, np.bool_, np.complex64])
        np.savez(p, x=(rng.random((n, *X_SHAPE)) * 10).astype(dt))
    elif kind == 1:  # wrong shape
        shape = _pick(rng, [(n, 3, 8), (n, 1, 3, 8, 9), (0, *X_SHAPE), tuple(X_SHAPE), (n, 1, 3, 8, 8, 1), ()])
        np.savez(p, x=rng.random(shape).astype(np.float32))
    elif kind == 2:  # extreme values
        a = rng.random((n, *X_SHAPE), dtype=np.float32)
        a.reshape(-1)[rng.integers(0, a.size, int(rng.integers(1, 5)))] = _pick(rng, EXTREMES)
        np.savez(p, x=a)
    elif kind == 3:  # wrong or extra keys
        np.savez(p, **{_pick(rng, ["y", "x ", "X", "input"]): rng.random((n, *X_SHAPE), dtype=np.float32)},
                 **({"x": rng.random((n, *X_SHAPE), dtype=np.float32)} if rng.random() < 0.5 else {}))
    elif kind == 4:  # a member that is garbage
        with zipfile.ZipFile(p, "w") as z:
            z.writestr("x.npy", _pick(rng, [b"\x93NUMPY\x01\x00" + rng.bytes(40), rng.bytes(100), b""]))
    elif kind == 5:  # not a zip
        p.write_bytes(_pick(rng, [rng.bytes(200), f"{SECRET_MARK}\n".encode(), b""]))
    elif kind == 6:  # a pickle (object array)
        with zipfile.ZipFile(p, "w") as z:
            import io

            buf = io.BytesIO()
            np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
            z.writestr("x.npy", buf.getvalue())
    else:  # all values constant / huge but finite
        np.savez(p, x=np.full((n, *X_SHAPE), _pick(rng, [0.0, 3e38, -1e30, 1e-42]), np.float32))
    return Case(["quantize", model, "--calib", p, "-o", work / "q.onnx", "--quiet", "--analysis-samples", "1",
                 "--method", _pick(rng, ["minmax", "percentile", "entropy", "mse"])], _valid_files("q.onnx"))


# -- target YAML ----------------------------------------------------------------------------------
def _target_case(work: Path, rng: np.random.Generator) -> Case:
    model = _base(work)
    text = (ASSETS / "targets" / "phone-npu.yaml").read_text()
    t = work / "t.yaml"
    kind = int(rng.integers(0, 8))
    if kind == 0:  # a number replaced by something else
        import re

        nums = list(re.finditer(r"(?<=: )-?\d+(\.\d+)?", text))
        m = _pick(rng, nums)
        text = text[:m.start()] + _pick(rng, [".nan", ".inf", "-.inf", "-1", "0", "1e400", "'12'", "[]", "{}", "~",
                                              "99999999999999999999999", "1.0e-320", "true"]) + text[m.end():]
    elif kind == 1:  # a line deleted
        lines = text.splitlines()
        del lines[int(rng.integers(0, len(lines)))]
        text = "\n".join(lines)
    elif kind == 2:  # deep nesting
        depth = int(_pick(rng, [70, 5000, 20_000]))
        text = "name: x\nnpu: " + ("[" * depth + "]" * depth if rng.random() < 0.5 else
                                   "".join(f"{' ' * k}a{k}:\n" for k in range(min(depth, 1500))))
    elif kind == 3:  # too big
        t.write_text(text)
        with open(t, "a") as fh:
            fh.write("# " + "x" * 1000 + "\n")
            fh.truncate(int(_pick(rng, [2 * 2**20, 100 * 2**20])))
        text = ""
    elif kind == 4:  # not YAML / not a target, content never to be echoed
        text = _pick(rng, [f"{SECRET_MARK}:x:0:0:root:/root:/bin/bash\n" * 20, f"- {SECRET_MARK}\n- [",
                           f"{SECRET_MARK} {{[", "\x00\x01\x02" + SECRET_MARK, f"'{SECRET_MARK}"])
    elif kind == 5:  # aliases (billion laughs) and tags
        text = _pick(rng, ['a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n'
                           'c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n'
                           'e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n'
                           'g: [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n',
                           "!!python/object/apply:os.system ['true']\n", text + "\nname: dup\n"])
    elif kind == 6:  # unknown op names or constraint values
        text = text.replace("    Conv: {}", "    " + _pick(rng, ["Conv: {max_kernel: .nan}", "Conv: {max_rank: -1}",
                                                                 "NoSuchOp: {}", "Conv: {dtypes: [int3]}",
                                                                 "Conv: [1, 2]", "'" + "Q" * 500 + "': {}"]), 1)
    else:  # many op entries
        text = text.replace("  ops:\n", "  ops:\n" + "".join(f"    Op{k}: {{}}\n" for k in range(int(
            _pick(rng, [10, 5000, 200_000])))), 1)
    if text:
        t.write_text(text)
    return Case(["simulate", model, "--target", t, "--json"])


# -- output paths ---------------------------------------------------------------------------------
def _output_case(work: Path, rng: np.random.Generator) -> Case:
    model = _base(work)
    (work / "existing.onnx").write_bytes(b"keep me")
    (work / "adir").mkdir()
    paths = [work / "out.onnx", work / "nodir" / "x.onnx", work / "adir", model, work / "existing.onnx",
             work / "out.onnx", work / "r.json", work / "nodir" / "r.json", work / "calib.npz"]
    o, r = _pick(rng, paths), _pick(rng, paths)
    cmd = _pick(rng, ["optimize", "quantize", "run"])
    if cmd == "optimize":
        argv = ["optimize", model, "-o", o] + (["--report", r] if rng.random() < 0.7 else [])
    elif cmd == "quantize":
        argv = ["quantize", model, "--calib", _calib(work, rng), "-o", o, "--quiet", "--analysis-samples", "1"] + (
            ["--report", r] if rng.random() < 0.7 else [])
    else:
        np.savez(work / "in.npz", x=np.zeros(X_SHAPE, np.float32))
        argv = ["run", model, "--inputs", work / "in.npz", "--out", _pick(rng, [work / "o.npz", work / "nodir" / "o.npz",
                                                                               work / "adir", work / "in.npz", model])]

    def check(w: Path) -> str | None:
        if model.read_bytes() != onnx.load(model).SerializeToString() or not (work / "existing.onnx").exists():
            return "an input was overwritten"
        return None

    return Case(argv, check)


# -- extreme numerics in models -------------------------------------------------------------------
def _numeric_case(work: Path, rng: np.random.Generator) -> Case:
    m = _conv_model()
    w = numpy_helper.to_array(m.graph.initializer[0]).copy()
    w.reshape(-1)[rng.integers(0, w.size, int(rng.integers(1, 4)))] = _pick(rng, EXTREMES)
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    if rng.random() < 0.6:
        b = np.zeros(3, np.float32)
        b[int(rng.integers(0, 3))] = _pick(rng, EXTREMES)
        m.graph.initializer.append(numpy_helper.from_array(b, "bias"))
        m.graph.node[0].input.append("bias")
    p = work / "m.onnx"
    onnx.save(m, p)
    cmd = _pick(rng, ["quantize", "quantize", "optimize", "run", "simulate"])
    if cmd == "quantize":
        extra = ["--per-channel"] if rng.random() < 0.5 else []
        extra += ["--symmetric"] if rng.random() < 0.3 else []
        return Case(["quantize", p, "--calib", _calib(work, rng), "-o", work / "q.onnx", "--quiet",
                     "--analysis-samples", "1", "--method", _pick(rng, ["minmax", "percentile", "entropy", "mse"]),
                     *extra], _valid_files("q.onnx"))
    if cmd == "optimize":
        return Case(["optimize", p, "-o", work / "o.onnx"], _valid_files("o.onnx"))
    if cmd == "run":
        x = rng.random(X_SHAPE, dtype=np.float32)
        x.reshape(-1)[0] = _pick(rng, EXTREMES)
        np.savez(work / "in.npz", x=x)
        return Case(["run", p, "--inputs", work / "in.npz", "--out", work / "o.npz"], _valid_files("o.npz"))
    return Case(["simulate", p, "--target", "phone-npu"])


FAMILIES: dict[str, Callable[[Path, np.random.Generator], Case]] = {
    "project files": _project_case, "option values": _option_case, "image folders": _image_case,
    "calibration npz": _npz_case, "target yaml": _target_case, "output paths": _output_case,
    "extreme numerics": _numeric_case,
}


def _snapshot(work: Path) -> set[Path]:
    return set(work.rglob("*"))


def run_input_case(family: str, seed: int, timeout_s: int = 20) -> tuple[str, str]:
    """(outcome, detail) of one case of ``family`` (see the module docstring for outcomes)."""
    rng = np.random.default_rng([seed, sorted(FAMILIES).index(family)])
    work = Path(tempfile.mkdtemp(prefix="fuzz-in-"))
    try:
        case = FAMILIES[family](work, rng)
        before = _snapshot(work)
        out, err = StringIO(), StringIO()
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(timeout_s)
        t0 = time.monotonic()
        try:
            rc = main(case.argv, Out(out, err))
        except _Timeout:
            return "TIMEOUT", f"{family} seed {seed}: over {timeout_s} s: {' '.join(case.argv[:2])}"
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        elapsed = time.monotonic() - t0
        stderr = err.getvalue()
        where = f"{family} seed {seed} ({' '.join(a.replace(str(work), '') for a in case.argv)[:160]})"
        if rc == 1:
            return "INTERNAL", f"{where}: {stderr.strip()[:300]}"
        if rc == 2:
            lines = stderr.strip().splitlines()
            if len(lines) != 1 or not lines[0].startswith("error: ") or "Traceback" in stderr:
                return "BAD-MESSAGE", f"{where}: {stderr[:300]!r}"
            if SECRET_MARK in stderr:
                return "BAD-MESSAGE", f"{where}: echoed a file's content: {stderr[:200]!r}"
            new = [p for p in _snapshot(work) - before]
            if new:
                return "LEFT-BEHIND", f"{where}: {sorted(p.name for p in new)}"
            return "clean-error", lines[0][:120]
        if rc != 0:
            return "INTERNAL", f"{where}: exit {rc}: {stderr.strip()[:200]}"
        if elapsed > timeout_s:
            return "TIMEOUT", where
        bad = case.check(work) if case.check else None
        return ("INVALID", f"{where}: {bad}") if bad else ("ok", "")
    finally:
        shutil.rmtree(work, ignore_errors=True)
