"""The files a command writes: checked before any work, staged, then committed together.

``Outputs`` is the one mechanism every command uses (``atomic_write`` is its one-file case):

1. ``add(option, path)`` as soon as the options are parsed: the path must not be a folder, its
   folder must exist and be writable, and it must differ from every other output and from the
   command's inputs (``-o out.onnx --report out.onnx`` is refused before anything runs).
2. ``commit({path: bytes})`` once every result is computed: each file is written to a temporary
   file in its own folder and fsynced; only when all are staged are they renamed into place. An
   error before the renames leaves nothing new behind.

A file keeps the mode it had (a new one gets 0666 & ~umask, not mkstemp's 0600), and
temporary files that a killed writer left behind (older than a minute) are removed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from engine.errors import InputError

STALE_TEMP_SECONDS = 60


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()  # read once at import (os.umask is process-wide; never toggle it later)


def _folder(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def check_writable(path: Path, option: str | None = None) -> None:
    """Refuse an output path that cannot be written (a folder, a missing or read-only folder)."""
    label = f"{option} {path}" if option else str(path)
    folder = _folder(path)
    if path.is_dir():
        raise InputError(f"{label}: is a folder, not a file")
    if path.exists() and not path.is_file():  # a device, a fifo: renaming onto it would replace it
        raise InputError(f"{label}: is not a regular file")
    if not folder.is_dir():
        raise InputError(f"{label}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{label}: cannot write into {folder} (permission denied)")
    if path.exists() and not os.access(path, os.W_OK) and not os.access(folder, os.W_OK):
        raise InputError(f"{label}: cannot replace the file (permission denied)")


class Outputs:
    """The output files of one command (see the module docstring)."""

    def __init__(self, inputs: Iterable[str | os.PathLike | None] = ()) -> None:
        self._inputs = {Path(p).resolve(): str(p) for p in inputs if p}
        self._paths: dict[Path, tuple[str, Path]] = {}

    def add(self, option: str, path: str | os.PathLike | None) -> Path | None:
        """Check and register one output path (None passes through: an optional output not asked for)."""
        if path is None:
            return None
        p = Path(path)
        check_writable(p, option)
        key = p.resolve()
        if key in self._paths:
            other = self._paths[key][0]
            raise InputError(f"{option} {p}: the same file as {other}; give each output its own path")
        if key in self._inputs:
            raise InputError(f"{option} {p}: the same file as the input {self._inputs[key]}; "
                             "write the output elsewhere")
        self._paths[key] = (option, p)
        return p

    def commit(self, files: Mapping[str | os.PathLike, bytes]) -> None:
        """Stage every file beside its destination, then rename them all into place."""
        commit_files(files)


def _stage(path: Path, data: bytes) -> str:
    folder = _folder(path)
    if not folder.is_dir():
        raise InputError(f"{path}: folder {folder} does not exist")
    now = time.time()
    for leftover in folder.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(OSError):
            if now - leftover.stat().st_mtime > STALE_TEMP_SECONDS:
                leftover.unlink()
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        mode = 0o666 & ~_UMASK
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        os.fchmod(fd, mode)
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise InputError(f"{path}: cannot write: {exc.strerror}") from None
    return tmp


def commit_files(files: Mapping[str | os.PathLike, bytes]) -> None:
    """Write several files all-or-nothing (as far as renames in one folder allow)."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, data in files.items():
            p = Path(path)
            staged.append((_stage(p, data), p))
        for tmp, p in staged:
            os.replace(tmp, p)
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}") from None
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    for folder in {_folder(p) for _, p in staged}:
        with contextlib.suppress(OSError):  # make the renames durable where directories can be fsynced
            dfd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temporary file in the same folder, fsync, rename."""
    commit_files({path: data})
