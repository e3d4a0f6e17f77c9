"""Examples of formats whose feature may or may not be in this build: project, TFLite, sweep.

Each returns the example when the feature exists (the ``sweep`` subcommand is registered; a
bundled target's YAML lists ``tflite`` under ``exports``) and otherwise one line saying the
example appears when it does, so the staleness test stays exact either way.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import yaml

from tools.docgen.sandbox import json_block, shorten, zero_timings

DIGITS = "assets/models/digits_cnn.onnx"
DIGITS_CALIB = "assets/data/digits_calib.npz"
SWEEP_COLUMNS = ("model", "target", "method", "per_channel", "dtype", "latency_us", "npu_ops", "cpu_ops",
                 "sram_peak_kib", "output_sqnr_db", "cosine", "seconds", "error")


def _block(lang: str, text: str) -> str:
    return f"```{lang}\n{text}{'' if text.endswith(chr(10)) else chr(10)}```\n"


def project_example(page: Any) -> str:
    """A project saved with engine.project.save_project, then compiled from the command line."""
    from engine.project import Project, save_project, sha256_of

    sb = page.sandbox
    model = sb.path / DIGITS
    project = Project(model_path=model, model_sha256=sha256_of(model), target="phone-npu",
                      passes={"fuse_activation": True},
                      quantization={"method": "entropy", "per_channel": True, "symmetric": False, "dtype": "int8",
                                    "calibration": DIGITS_CALIB},
                      pins={"/body/body.3/Conv": "npu"})
    save_project(sb.path / "digits.npuproj", project)
    text = (sb.path / "digits.npuproj").read_text(encoding="utf-8")
    result = page.run("npu-studio compile digits.npuproj -o out/from-project")
    return (json_block(json.loads(text), "schemas/project.json")
            + "\nCompiling it uses its target, quantization settings, calibration set and pins:\n\n"
            + _block("text", result.transcript()))


def _tflite_targets() -> list[str]:
    from engine.hw.target import bundled_targets

    names = []
    for name, path in bundled_targets().items():
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if isinstance(raw, dict) and "tflite" in (raw.get("exports") or []):
            names.append(name)
    return names


def tflite_example(page: Any) -> str:
    """``compile`` on the first bundled target that exports TFLite, and what model.tflite is."""
    names = _tflite_targets()
    if not names:
        return ("_No bundled target lists `tflite` under `exports` in this build; the example appears here "
                "when one does (rerun `python tools/gen_docs.py`)._\n")
    target = names[0]
    result = page.run(f"npu-studio compile {DIGITS} --target {target} --calib {DIGITS_CALIB} -o out/tflite")
    path = page.sandbox.path / "out" / "tflite" / "model.tflite"
    if not path.is_file():
        from tools.docgen.pages import PageError

        raise PageError(f"{target} lists tflite in exports but compile wrote no model.tflite")
    data = path.read_bytes()
    manifest = json.loads((path.parent / "manifest.json").read_text(encoding="utf-8"))
    lines = [f"Bundled targets that export TFLite: {', '.join(f'`{n}`' for n in names)}.", "",
             _block("text", result.transcript()),
             # the size and identifier, not the hash: the calibration's float sums follow the BLAS
             # kernel (OPENBLAS_CORETYPE=Haswell and SkylakeX differ in the last bit), and one scale's
             # last bit changes the file's bytes, never its size
             f"`model.tflite`: {len(data):,} bytes, FlatBuffer file identifier `{data[4:8].decode('latin-1')}`, "
             f"its sha256 listed in manifest.json{' under `files`' if 'model.tflite' in manifest['files'] else ''}."]
    return "\n".join(lines) + "\n"


SWEEP_SPEC = f"""models:
  - path: {DIGITS}
    calib: {DIGITS_CALIB}
targets:
  - phone-npu
  - ethos-u55
quant:
  - {{method: minmax, per_channel: false, dtype: int8}}
  - {{method: entropy, per_channel: true, dtype: int8}}
"""


def sweep_example(page: Any) -> str:
    """A four-point sweep of the digits model when ``sweep`` is a registered command."""
    from engine.cli import build_parser
    from tools.docgen.cli_ref import _subparsers

    if "sweep" not in _subparsers(build_parser()):
        return ("_The `sweep` command is not in this build; the example appears here when it is "
                "(rerun `python tools/gen_docs.py`)._\n")
    page.sandbox.write("sweep.yaml", SWEEP_SPEC)
    command = "npu-studio sweep sweep.yaml -o out/sweep --workers 1 --json"
    result = page.run(command)
    doc = zero_timings(json.loads(result.stdout))
    rows = list(csv.DictReader(io.StringIO(page.sandbox.read("out/sweep/results.csv"))))
    for r in rows:
        if "seconds" in r:
            r["seconds"] = "0"
    rows.sort(key=lambda r: tuple(str(v) for v in r.values()))
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return ("`sweep.yaml`:\n\n" + _block("yaml", SWEEP_SPEC) + f"\n```text\n$ {command}\n```\n\n"
            + json_block(shorten(doc), "schemas/sweep.json")
            + "\n`out/sweep/results.csv` (rows sorted, `seconds` written as 0 here):\n\n" + _block("csv", buf.getvalue()))


def editor_shortcuts(page: Any) -> str:
    """The shortcut table of the editor, read from a main window's actions (app.help)."""
    import os
    import tempfile

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.help import shortcut_rows
    from app.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory() as tmp:
        settings = QSettings(os.path.join(tmp, "settings.ini"), QSettings.Format.IniFormat)
        window = MainWindow(settings=settings, restore_state=False)
        try:
            rows = shortcut_rows(window)
        finally:
            analysis = getattr(window, "analysis", None)  # its worker threads, as the screenshot path does
            if analysis is not None:
                analysis.controller.shutdown()
            window.close()
            window.deleteLater()
            app.processEvents()
    lines = ["| Menu | Action | Shortcut |", "|---|---|---|"]
    lines += [f"| {menu} | {text} | {keys.replace('|', chr(92) + '|')} |" for menu, text, keys in rows]
    return "\n".join(lines) + "\n"
