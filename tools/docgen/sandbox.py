"""Where the documentation's example commands run: a scratch folder that looks like the repository.

Every example in docs/ is a real command run in-process through ``engine.cli.main`` (the same
entry point as the ``npu-studio`` script) or a real Python snippet. They run in a temporary
folder holding a copy of the repository's bundled ``assets/`` and an empty ``out/``, so the relative
paths a reader types from a clone (``assets/models/digits_cnn.onnx``, ``-o out/digits``) are the
paths the examples use, and nothing of the repository is written.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# Fields that hold wall-clock time: written as 0 in the documentation so it is deterministic.
TIMING_KEYS = ("ms", "seconds", "elapsed_ms", "wall_s")


@dataclass
class CmdResult:
    """What one command printed and its exit status."""

    command: str
    status: int
    stdout: str
    stderr: str

    def transcript(self) -> str:
        """The terminal view: the prompt line, stdout, then stderr, then a non-zero status."""
        text = f"$ {self.command}\n{self.stdout}{self.stderr}"
        if self.status:
            text += f"(exit status {self.status})\n"
        return text


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


class Sandbox:
    """A scratch folder with a copy of ``assets/`` and an empty ``out/``; commands run inside it."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="npu-docs-"))
        for part in ("models", "data", "targets"):  # copies (2 MB): paths resolve inside the sandbox
            shutil.copytree(ROOT / "assets" / part, self.path / "assets" / part)
        (self.path / "out").mkdir()
        self.results: list[CmdResult] = []

    def close(self) -> None:
        """Remove the folder."""
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, command: str) -> CmdResult:
        """Run one ``npu-studio ...`` command line in-process and record what it printed."""
        from engine.cli import Out, main

        argv = shlex.split(command)
        if argv and argv[0] in ("npu-studio", "python -m engine"):
            argv = argv[1:]
        out, err = io.StringIO(), io.StringIO()
        with _cwd(self.path):
            status = main(argv, Out(out, err))
        result = CmdResult(command, status, out.getvalue(), err.getvalue())
        self.results.append(result)
        return result

    def read(self, rel: str) -> str:
        """A file an earlier command wrote (path relative to the sandbox)."""
        return (self.path / rel).read_text(encoding="utf-8")

    def write(self, rel: str, text: str) -> Path:
        """Put a file (e.g. a sweep spec) where the commands can read it."""
        dest = self.path / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text, encoding="utf-8")
        return dest

    def exec_python(self, code: str, namespace: dict[str, Any], name: str) -> str:
        """Execute a snippet in ``namespace`` inside the sandbox; returns what it printed."""
        buf = io.StringIO()
        with _cwd(self.path), contextlib.redirect_stdout(buf):
            exec(compile(code, name, "exec"), namespace)
        return buf.getvalue()


def zero_timings(doc: Any) -> Any:
    """A copy of a JSON document with every wall-clock field (see TIMING_KEYS) set to 0."""
    if isinstance(doc, dict):
        return {k: (0 if k in TIMING_KEYS and isinstance(v, (int, float)) else zero_timings(v))
                for k, v in doc.items()}
    if isinstance(doc, list):
        return [zero_timings(v) for v in doc]
    return doc


def shorten(doc: Any, items: int = 3) -> Any:
    """A copy with every list cut to its first ``items`` entries (the page says so)."""
    if isinstance(doc, dict):
        return {k: shorten(v, items) for k, v in doc.items()}
    if isinstance(doc, list):
        return [shorten(v, items) for v in doc[:items]]
    return doc


def json_block(doc: Any, schema: str | None) -> str:
    """A fenced JSON block, preceded by the marker naming the schema the test validates it with."""
    marker = f"<!-- schema: {schema} -->\n" if schema else ""
    return f"{marker}```json\n{json.dumps(doc, indent=2)}\n```\n"


_MS_TEXT = re.compile(r"\b\d+\.\d ms\b")


def zero_text_timings(text: str) -> str:
    """Replace the measured pass times that ``optimize`` prints (``  0.4 ms``) by ``0.0 ms``."""
    return _MS_TEXT.sub(lambda m: "0.0 ms".rjust(len(m.group(0))), text)
