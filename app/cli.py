"""``npu-studio gui [MODEL] [--target T] [--calib C] [--screenshot OUT.png]`` and the bare
``npu-studio`` (the editor on the bundled demo model).

Without a display the command says so in one line and does the headless thing instead:
compile the model headless for the default target and print the summary and the report path.
``--screenshot`` renders the main window offscreen (QT_QPA_PLATFORM=offscreen works) to a PNG.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from engine.cli import EXIT_OK, Out, _shapes, add_model_args, extra_command
from engine.errors import InputError, ModelError

ROOT = Path(__file__).resolve().parents[1]
DEMO_MODEL = ROOT / "assets" / "models" / "mobilenet_demo.onnx"
DEMO_CALIB = ROOT / "assets" / "data" / "mobilenet_calib.npz"
DEFAULT_TARGET = "phone-npu"
log = logging.getLogger(__name__)


def has_display() -> bool:
    """True when a window can be shown to a person (not offscreen, and a display server)."""
    platform = os.environ.get("QT_QPA_PLATFORM", "")
    if platform.startswith(("offscreen", "minimal", "vnc")):
        return False
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) or platform.startswith(
            ("eglfs", "linuxfb"))
    return True


def _model_path(args: argparse.Namespace) -> Path:
    if args.model:
        return Path(args.model)
    if not DEMO_MODEL.is_file():
        raise InputError(f"{DEMO_MODEL}: the bundled demo model is missing (give a MODEL)")
    return DEMO_MODEL


def _headless(args: argparse.Namespace, out: Out, model: Path) -> int:
    """No display: compile the model for the target (default phone-npu) into a temporary folder and
    print the summary and the report's path. The bundled demo uses its bundled calibration set."""
    from engine.cli import main as cli_main

    outdir = Path(tempfile.mkdtemp(prefix="npu-studio-")) / model.stem
    argv = ["compile", str(model), "-o", str(outdir), "--target", args.target or DEFAULT_TARGET]
    calib = args.calib or (str(DEMO_CALIB) if model.resolve() == DEMO_MODEL.resolve() else None)
    argv += ["--calib", calib] if calib else ["--allow-synthetic-calibration"]
    for s in args.shape or []:
        argv += ["--shape", s]
    return cli_main(argv, out)


def cmd_gui(args: argparse.Namespace, out: Out) -> int:
    """Open the editor (or render a screenshot, or work headless without a display)."""
    model = _model_path(args)
    if not model.exists():
        raise ModelError(f"{model}: no such file")
    if args.screenshot:
        return screenshot(model, Path(args.screenshot), args.target, _shapes(args), out, calib=args.calib)
    if not has_display():
        out.info("no display: cannot open the editor here; compiling headless instead")
        return _headless(args, out, model)
    from PySide6.QtWidgets import QApplication

    from app.__main__ import make_app, recovery_dir
    from app.main_window import MainWindow

    # No kernels.warm_up() here: the worker process that runs the analysis warms them up, once
    # (app/worker_process.py); this process runs no kernel.
    app = QApplication.instance() or make_app()
    win = MainWindow(recovery_dir=recovery_dir())
    from app.walkthrough_probe import install_if_asked

    install_if_asked(win)  # NPU_STUDIO_WALKTHROUGH: the window's state as JSON for tools/walkthrough.py
    if args.calib and getattr(win, "analysis", None) is not None:
        win.analysis.controller.calibration_for_next = args.calib
    win.show()
    if not win.offer_recovery():
        win.open_path(model, target=args.target, shapes=_shapes(args))
    return int(app.exec())


SHOT_TIMEOUT_S = 900.0  # for the whole screenshot: open, compile, analysis, charts


def screenshot(model: Path, dest: Path, target: str | None, shapes: dict, out: Out, size=(1600, 1000),
               timeout: float = SHOT_TIMEOUT_S, calib: str | None = None) -> int:
    """Load, compile, lay out and render the main window to ``dest`` (a PNG); exit status.

    Everything must be done within ``timeout`` seconds; what is not by then is named in one
    warning line on stderr and the picture shows it unfinished (a silent half-done picture with
    exit 0 was what a loaded machine got before)."""
    if dest.parent and not dest.parent.exists():
        raise InputError(f"{dest}: folder {dest.parent} does not exist")
    _refuse_unloadable(model, shapes)  # before Qt and the editor are imported
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.__main__ import make_app
    from app.main_window import MainWindow
    if target:
        from app import placement

        placement.resolve_target(target)  # a bad target is a clear error before any window
    # A Qt application made here ends with the process: its teardown at interpreter exit
    # segfaulted after a good PNG (rc -11 in 1 of 4 runs on silero_vad_ifless, no Python frame).
    out.end_process = QApplication.instance() is None
    app = QApplication.instance() or make_app()  # no warm-up here either (cmd_gui says why)
    tmp = tempfile.mkdtemp(prefix="npu-studio-shot-")
    settings = QSettings(str(Path(tmp) / "settings.ini"), QSettings.Format.IniFormat)
    if calib and not Path(calib).exists():
        raise InputError(f"{calib}: no such calibration file or folder")
    win = MainWindow(settings=settings, restore_state=False)
    win.interactive = False  # an error must end the command, not wait in a message box
    analysis = getattr(win, "analysis", None)  # the charts (app/analysis_dock.py)
    if analysis is not None and calib:
        analysis.controller.calibration_for_next = calib
    win.resize(*size)
    win.show()
    task = win.open_path(model, target=target, shapes=shapes)
    end = time.monotonic() + timeout
    # The load may fail before a slot could be connected here: the task keeps its error.
    _wait(app, lambda: (win.scene is not None and not win.scene.is_populating and win.doc is not None)
          or task.error is not None, end)
    if task.error is not None:
        win.close()
        if task.internal_error:
            raise RuntimeError(task.error)
        raise ModelError(task.error)
    if win.doc is None:
        raise ModelError(f"{model}: timed out after {timeout:.0f} s while loading")
    unfinished = [] if not win.scene.is_populating else ["drawing the graph"]
    doc = win.doc
    doc.flush()
    doc.wait_for_placement(max(0.0, end - time.monotonic()))
    compiled: list[object] = []
    win.compile_finished.connect(compiled.append)
    job = win.compile()
    if job is not None and not _wait(app, lambda: bool(compiled) or (job.done.is_set() and not compiled
                                                                       and _settled(app)), end):
        unfinished.append("the compile")
    doc.wait_for_placement(max(0.0, end - time.monotonic()))
    if analysis is not None:
        unfinished += analysis.wait_for_screenshot(max(0.0, end - time.monotonic()))
    app.processEvents()
    win.canvas.minimap.rebuild()
    win.canvas.minimap.finish()
    win.frame_for_screenshot()
    app.processEvents()
    image = win.grab()
    if not image.save(str(dest), "PNG"):
        raise InputError(f"{dest}: cannot write the PNG")
    from app import style

    out.line(f"wrote {dest} ({image.width()}x{image.height()}, {style.count(len(doc.graph), 'node')})")
    if unfinished:
        them = "it" if len(unfinished) == 1 else "them"
        out.info(f"warning: {', '.join(unfinished)} did not finish within {timeout:.0f} s: the picture shows "
                 f"{them} unfinished (a busy machine? run it again)")
    win.doc.undo_stack.setClean()
    win.close()
    if analysis is not None:
        analysis.controller.shutdown()
    return EXIT_OK


def _refuse_unloadable(model: Path, shapes: dict) -> None:
    """The engine's one-line error for a model the screenshot cannot show compiled (not a
    model, invalid, dynamic inputs left unfixed without --shape: the CLI's rule), before the
    window and the compiled kernels are made (those took 30 s on a loaded machine first)."""
    import engine
    from engine import project as projects
    from engine.compiler import require_static

    if model.suffix.lower() == projects.SUFFIX:
        graph, _project = projects.open_project(model)
    else:
        graph = engine.load(model, shapes=shapes or None)
    try:
        require_static(graph)
    except InputError as exc:
        raise InputError(f"{model}: {exc}") from None


def _settled(app) -> bool:
    app.processEvents()
    return True


def _wait(app, done, end: float) -> bool:
    """Process events until ``done()`` or the monotonic time ``end``; True when done."""
    while not done():
        if time.monotonic() >= end:
            return False
        app.processEvents()
        time.sleep(0.005)
    return True


@extra_command
def add_gui_command(sub: argparse._SubParsersAction) -> None:
    """Register ``gui``."""
    p = sub.add_parser("gui", help="open the editor (default: the bundled demo model)")
    add_model_args(p, model_required=False)
    p.add_argument("--target", metavar="T", help="hardware target: a bundled name or a YAML file")
    p.add_argument("--calib", metavar="C", help="calibration data (.npz or a folder of images)")
    p.add_argument("--screenshot", metavar="OUT.png", help="render the window to a PNG and exit")
    p.set_defaults(func=cmd_gui)
