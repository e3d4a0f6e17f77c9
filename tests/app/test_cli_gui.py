"""``npu-studio gui --screenshot`` offscreen, and the headless fallback without a display."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import onnx
import pytest
from PySide6.QtGui import QImage

from engine.cli import Out, main
from tests.app._helpers import residual_cnn
from tests.models import ROOT

pytestmark = pytest.mark.gui


def test_gui_screenshot_renders_the_window_to_a_png(qapp, tmp_path):
    model = tmp_path / "residual.onnx"
    onnx.save(residual_cnn(), model)
    out_png = tmp_path / "shot.png"
    stdout, stderr = io.StringIO(), io.StringIO()
    assert main(["gui", str(model), "--screenshot", str(out_png)], Out(stdout, stderr)) == 0, stderr.getvalue()
    img = QImage(str(out_png))
    assert img.width() >= 1200
    assert img.height() >= 800
    assert "wrote" in stdout.getvalue()


def test_gui_screenshot_of_a_missing_model_is_a_clean_error(qapp, tmp_path):
    stderr = io.StringIO()
    status = main(["gui", str(tmp_path / "nope.onnx"), "--screenshot", str(tmp_path / "x.png")], Out(io.StringIO(), stderr))
    assert status == 2
    assert stderr.getvalue().startswith("error:")
    assert len(stderr.getvalue().splitlines()) == 1


def test_bare_command_without_display_says_so_in_one_line_and_works_headless(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["QT_QPA_PLATFORM"] = "offscreen"
    res = subprocess.run([sys.executable, "-m", "engine"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    notes = [line for line in res.stderr.splitlines() if "display" in line]
    assert len(notes) == 1
    assert res.stdout.strip()
