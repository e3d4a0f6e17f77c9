"""Fixtures of the GUI tests: offscreen Qt, a model file, a document, a main window."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from pathlib import Path

import onnx
import pytest

from tests.app._helpers import close_window, open_window, residual_cnn


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "residual.onnx"
    onnx.save(residual_cnn(), path)
    return path


@pytest.fixture
def recovery_dir(tmp_path: Path) -> Path:
    return tmp_path / "recovery"


@pytest.fixture
def settings(tmp_path: Path):
    from PySide6.QtCore import QSettings

    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def doc(qapp, model_file: Path, recovery_dir: Path):
    import engine
    from app.document import Document

    d = Document(engine.load(model_file), model_file, recovery_dir=recovery_dir)
    d.analyze()
    yield d
    d.close()


@pytest.fixture
def window(qtbot, model_file: Path, settings, recovery_dir: Path):
    """A main window with the residual model open and shown."""
    win = open_window(qtbot, model_file, settings, recovery_dir)
    yield win
    close_window(win)
