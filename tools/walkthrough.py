#!/usr/bin/env python3
"""Drive the real editor under Xvfb with synthetic mouse and key events and screenshot each step.

    python tools/walkthrough.py [--model M.onnx] [--shape 1,3,64,64] [--out assets/screenshots/walkthrough]

Needs (Debian/Ubuntu): ``apt-get install -y xvfb libxcb-icccm4 libxcb-keysyms1 xdotool imagemagick``
and the project's venv (``make test`` installs it). Without ``--model`` it builds a small model
with a dynamic batch dimension (onnx.helper) so the shape dialog appears; rapidocr's
PP-OCRv6_det_small.onnx works too (slower).

Steps: open the model -> the shape dialog (type a shape, OK) -> drag Relu from the palette onto
the canvas -> draw a wire to its input -> delete a node -> undo -> pin a node to the CPU
(context menu) -> compile (Ctrl+B) -> export the bundle (Ctrl+Shift+E, type the folder).
After each step a screenshot goes to OUT/NN_step.png (the whole 1280x800 screen).

Where to click comes from the JSON state the editor writes when NPU_STUDIO_WALKTHROUGH is set
(app/walkthrough_probe.py: docks, palette rows, node rectangles and ports in screen
coordinates); each step then waits (with a timeout) for its effect in that state and the script
exits 1 with a message naming the step when it does not come. Settings, recovery files and
recent files go to a throwaway HOME, never the user's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCREEN = (1280, 800)
OFF_CANVAS = {"compiling", "drawing the charts", "computing the histogram"}  # busy, but not moving the canvas (the probe's names)
NEEDED = {"Xvfb": "xvfb", "xdotool": "xdotool", "import": "imagemagick", "convert": "imagemagick"}


def say(text: str) -> None:
    """One line of progress on stdout."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class StepFailed(Exception):
    """A step did not have its effect (the message says which and what was seen)."""


def small_dynamic_model(path: Path) -> None:
    """Conv -> Relu -> Conv -> Add -> GlobalAveragePool -> Flatten -> Gemm with batch "N"."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def init(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a1"], name="add1"),
        helper.make_node("GlobalAveragePool", ["a1"], ["g1"], name="gap"),
        helper.make_node("Flatten", ["g1"], ["f1"], name="flatten"),
        helper.make_node("Gemm", ["f1", "wf", "bf"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "walkthrough_demo",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [init("w1", 16, 3, 3, 3), init("b1", 16), init("w2", 16, 16, 3, 3), init("b2", 16),
         init("wf", 10, 16), init("bf", 10)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


class Session:
    """Xvfb, the editor process and the state file, with waits that always time out."""

    def __init__(self, out: Path, work: Path, timeout: float) -> None:
        self.out, self.work, self.timeout = out, work, timeout
        self.compile_timeout = 600.0  # a wait that may include a background compile (PP-OCRv6 det at 320x320)
        self.state_file = work / "state.json"
        self.display = self._free_display()
        self.env = dict(os.environ, DISPLAY=f":{self.display}")
        self.xvfb: subprocess.Popen | None = None
        self.app: subprocess.Popen | None = None
        self.shot = 0
        self.t0 = self.t_last = time.monotonic()  # each screenshot says how long its step took

    @staticmethod
    def _free_display() -> int:
        for n in range(90, 200):
            if not Path(f"/tmp/.X11-unix/X{n}").exists() and not Path(f"/tmp/.X{n}-lock").exists():
                return n
        raise StepFailed("no free X display number between :90 and :199")

    def start_x(self) -> None:
        self.xvfb = subprocess.Popen(["Xvfb", f":{self.display}", "-screen", "0", f"{SCREEN[0]}x{SCREEN[1]}x24",
                                      "-nolisten", "tcp"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait("Xvfb to start", lambda: Path(f"/tmp/.X11-unix/X{self.display}").exists(), 15)

    def start_app(self, model: Path, log_path: Path) -> None:
        home = self.work / "home"
        home.mkdir()
        env = dict(self.env, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
                   XDG_DATA_HOME=str(home / ".local/share"), XDG_CACHE_HOME=str(home / ".cache"),
                   XDG_RUNTIME_DIR=str(home / "run"), NPU_STUDIO_WALKTHROUGH=str(self.state_file),
                   QT_QPA_PLATFORM="xcb", QT_SCALE_FACTOR="1", CI="")
        (home / "run").mkdir(mode=0o700)
        self.log = open(log_path, "w")  # noqa: SIM115 - open for the process's lifetime
        self.app = subprocess.Popen([sys.executable, "-m", "engine", "gui", str(model)], cwd=str(ROOT), env=env,
                                    stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        for proc in (self.app, self.xvfb):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()

    # -- state and waits -------------------------------------------------------------------------
    def state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def wait(self, what: str, cond, timeout: float | None = None) -> object:
        end = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < end:
            if self.app is not None and self.app.poll() is not None:
                raise StepFailed(f"the editor exited (status {self.app.returncode}) while waiting for {what}")
            got = cond()
            if got:
                return got
            time.sleep(0.15)
        raise StepFailed(f"timed out after {timeout or self.timeout:.0f} s waiting for {what}")

    def wait_state(self, what: str, cond, timeout: float | None = None) -> dict:
        def check():
            s = self.state()
            return s if s and cond(s) else None

        return self.wait(what, check, timeout)  # type: ignore[return-value]

    def settle(self, seconds: float = 0.0, still_ms: int = 400, compile_s: float = 0.0) -> dict:
        """The editor's own readiness signal (app/walkthrough_probe.py): wait until it reports
        nothing busy that moves the canvas (loading, laying out, drawing, placing) and a canvas
        that has not moved for ``still_ms``, in a state written after this call; returns that
        state, to aim at. A background compile does not move the canvas: it is waited for up to
        ``compile_s`` (a screenshot with current charts), then not (PP-OCRv6 det at 320x320
        compiles for minutes). ``seconds`` first lets an action's own events arrive."""
        if seconds:
            time.sleep(seconds)
        after = self.state().get("seq", 0)
        if compile_s:
            with contextlib.suppress(StepFailed):
                self.wait_state("the background compile", lambda s: s.get("seq", 0) > after
                                and not set(s.get("busy", [])) & OFF_CANVAS, compile_s)
        return self.wait_state("the editor to be idle with its canvas still",
                               lambda s: s.get("seq", 0) > after
                               and not [b for b in s.get("busy", ["?"]) if b not in OFF_CANVAS]
                               and s.get("still_ms", 0) >= still_ms, self.compile_timeout)

    def attempt(self, what: str, act, done, tries: int = 3, timeout: float = 10) -> dict:
        """Aim at a settled canvas and ``act(state)``; wait for ``done(state)``. When the effect
        does not come and the canvas moved meanwhile (a late scroll or relayout under the
        mouse), aim again at the new positions, up to ``tries`` times."""
        last: StepFailed | None = None
        for _ in range(tries):
            s = self.settle()
            act(s)
            try:
                return self.wait_state(what, done, timeout)
            except StepFailed as exc:
                last = exc
                now = self.state()
                if now.get("still_ms", 0) > 1000 * timeout and not now.get("busy"):
                    break  # the canvas held still all along: aiming again would not help
        raise last or StepFailed(f"{what}: no attempt was made")

    # -- input -----------------------------------------------------------------------------------
    def xdo(self, *args: object) -> str:
        r = subprocess.run(["xdotool", *map(str, args)], env=self.env, capture_output=True, text=True, timeout=20)
        if r.returncode != 0:
            raise StepFailed(f"xdotool {' '.join(map(str, args))} failed: {r.stderr.strip()}")
        return r.stdout.strip()

    def move(self, x: float, y: float) -> None:
        self.xdo("mousemove", int(x), int(y))

    def click(self, x: float, y: float, button: int = 1) -> None:
        self.move(x, y)
        time.sleep(0.1)
        self.xdo("click", button)

    def drag(self, a: tuple[float, float], b: tuple[float, float], steps: int = 12) -> None:
        self.move(*a)
        time.sleep(0.15)
        self.xdo("mousedown", 1)
        time.sleep(0.15)
        for k in range(1, steps + 1):
            self.move(a[0] + (b[0] - a[0]) * k / steps, a[1] + (b[1] - a[1]) * k / steps)
            time.sleep(0.04)
        time.sleep(0.2)
        self.xdo("mouseup", 1)

    def key(self, *keys: str) -> None:
        self.xdo("key", "--delay", 60, *keys)

    def type(self, text: str) -> None:
        self.xdo("type", "--delay", 40, text)

    # -- screenshots -----------------------------------------------------------------------------
    def screenshot(self, step: str) -> Path:
        self.shot += 1
        dest = self.out / f"{self.shot:02d}_{step}.png"
        raw = self.work / "raw.png"
        r = subprocess.run(["import", "-window", "root", str(raw)], env=self.env, capture_output=True, timeout=30)
        if r.returncode != 0:
            raise StepFailed(f"import -window root failed: {r.stderr.decode(errors='replace').strip()}")
        subprocess.run(["convert", str(raw), "-strip", "-colors", "256", "-define", "png:compression-level=9",
                        str(dest)], check=True, timeout=60)
        now = time.monotonic()
        say(f"  {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest} "
            f"({dest.stat().st_size // 1024} KB) step {now - self.t_last:.1f} s, at {now - self.t0:.1f} s")
        self.t_last = now
        return dest


def _center(rect: list[int]) -> tuple[float, float]:
    return rect[0] + rect[2] / 2, rect[1] + rect[3] / 2


def _inside(p: tuple[float, float], rect: list[int], margin: float = 0) -> bool:
    return rect[0] - margin <= p[0] <= rect[0] + rect[2] + margin and rect[1] - margin <= p[1] <= rect[1] + rect[3] + margin


def _empty_canvas_point(s: dict) -> tuple[float, float]:
    """A point of the canvas at least 90 px from every node (where a dropped op lands)."""
    cx, cy, cw, ch = s["canvas"]
    best, best_d = None, -1.0
    for fx in (0.2, 0.35, 0.5, 0.65, 0.8):
        for fy in (0.2, 0.35, 0.5, 0.65, 0.8):
            p = (cx + cw * fx, cy + ch * fy)
            d = min((max(abs(p[0] - _center(n["rect"])[0]) - n["rect"][2] / 2,
                         abs(p[1] - _center(n["rect"])[1]) - n["rect"][3] / 2) for n in s["nodes"]), default=1e9)
            if d > best_d:
                best, best_d = p, d
    if best is None or best_d < 60:
        raise StepFailed(f"no empty spot on the canvas (best {best_d:.0f} px from a node)")
    return best


def _node(s: dict, name: str, on_screen: bool = False) -> dict:
    for n in s["nodes"]:
        if n["name"] == name:
            if on_screen and not n["visible"]:
                raise StepFailed(f"node {name!r} is outside the visible canvas (pick one on screen)")
            return n
    shown = [n["name"] for n in s["nodes"] if n["visible"]][:12]
    raise StepFailed(f"node {name!r} is not on the canvas (on screen: {', '.join(shown)})")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("[0-9][0-9]_*.png"):
        old.unlink()
    work = Path(tempfile.mkdtemp(prefix="npu-walkthrough-"))
    model = Path(args.model).resolve() if args.model else work / "walkthrough_demo.onnx"
    if not args.model:
        small_dynamic_model(model)
    bundle = work / "bundle"
    ses = Session(out, work, args.timeout)
    ses.compile_timeout = args.compile_timeout
    step = "start"
    try:
        ses.start_x()
        ses.start_app(model, work / "editor.log")
        say(f"display :{ses.display}, work folder {work}")

        step = "01 open: the shape dialog asks for the dynamic input"
        s = ses.wait_state("the window and the shape dialog",
                           lambda s: s.get("modal") and s["modal"]["class"] == "ShapeDialog", 120)
        wid = ses.wait("the window id", lambda: ses.xdo("search", "--name", "NPU Studio").split()[:1], 10)[0]
        ses.xdo("windowmove", wid, 0, 0)
        ses.xdo("windowsize", wid, *SCREEN)
        s = ses.wait_state("the shape dialog on screen", lambda s: s.get("modal") and s["modal"].get("edits"), 20)
        edit = next(iter(s["modal"]["edits"].values()))
        ses.click(*_center(edit["rect"]))
        ses.key("ctrl+a")
        ses.type(args.shape)
        ses.wait_state("the typed shape in the dialog",
                       lambda s: s.get("modal") and args.shape in [e["text"] for e in s["modal"]["edits"].values()], 10)
        ses.screenshot("shape_dialog")

        step = "02 OK: the model opens placed with the typed shape"
        ses.key("Return")
        want = [int(d) for d in args.shape.split(",")]
        s = ses.wait_state("the model placed with the typed shape",
                           lambda s: not s.get("modal") and s.get("doc") and want in s["doc"]["inputs"].values()
                           and s["nodes"] and all(n["device"] not in (None, "unplaced") for n in s["nodes"]),
                           ses.compile_timeout)
        s = ses.settle(compile_s=120)
        ses.screenshot("opened_placed")
        n_nodes = s["doc"]["nodes"]

        step = "03 drag Relu from the palette onto the canvas"
        ses.click(*_center(s["palette_search"]))
        ses.type(args.op)
        ses.wait_state(f"{args.op} in the palette", lambda s: args.op in s["palette"], 10)
        s = ses.settle()
        target = _empty_canvas_point(s)
        ses.drag(_center(s["palette"][args.op]), target, steps=16)
        s = ses.wait_state("one node more", lambda s: s.get("doc") and s["doc"]["nodes"] == n_nodes + 1, 20)
        added = [n for n in s["nodes"] if n["op"] == args.op and not n["connected"][0]]
        if not added:
            raise StepFailed(f"no unconnected {args.op} on the canvas after the drop")
        new = added[-1]["name"]
        ses.settle(0.3, compile_s=90)
        ses.screenshot("dragged_from_palette")

        step = "04 draw a wire from an output port to the new node's input"
        src_name = args.wire_from
        ses.attempt("the new node's input connected",
                    lambda s: ses.drag(tuple(_node(s, src_name, on_screen=True)["outputs"][0]),
                                       tuple(_node(s, new, on_screen=True)["inputs"][0]), steps=16),
                    lambda s: _node(s, new)["connected"][0])
        ses.settle(0.3, compile_s=90)
        ses.screenshot("wire_drawn")

        step = "05 select a node and press Delete"
        victim = args.delete
        ses.attempt(f"{victim} selected", lambda s: ses.click(*_center(_node(s, victim, on_screen=True)["rect"])),
                    lambda s: _node(s, victim)["selected"])
        ses.key("Delete")
        s = ses.wait_state(f"{victim} deleted", lambda s: all(n["name"] != victim for n in s["nodes"]), 15)
        ses.settle(0.3, compile_s=90)
        ses.screenshot("node_deleted")

        step = "06 undo (Ctrl+Z) brings it back"
        ses.key("ctrl+z")
        s = ses.wait_state(f"{victim} back", lambda s: any(n["name"] == victim for n in s["nodes"]), 15)
        ses.settle(0.3, compile_s=90)
        ses.screenshot("undo")

        step = "07 pin a node to the CPU from its context menu"
        pin = args.pin
        ses.attempt("the context menu", lambda s: ses.click(*_center(_node(s, pin, on_screen=True)["rect"]), button=3),
                    lambda s: s.get("popup"))
        time.sleep(0.3)  # the menu's fade-in (a popup is open: the canvas is not what changes now)
        ses.screenshot("context_menu")
        ses.key("Down", "Down", "Return")  # Pin to NPU, Pin to CPU, Unpin
        s = ses.wait_state(f"{pin} pinned to the CPU", lambda s: _node(s, pin)["pin"] == "cpu"
                           and _node(s, pin)["device"] == "cpu", 30)
        s = ses.settle(0.3, compile_s=90)
        ses.screenshot("pinned_to_cpu")

        step = "08 compile (Ctrl+B)"
        before = (s.get("compiled") or {}).get("summary")
        ses.move(*_center(s["canvas"]))
        ses.key("ctrl+b")
        s = ses.wait_state("the compile's summary", lambda s: s.get("compiled")
                           and s["compiled"]["summary"] != before, ses.compile_timeout)
        ses.settle(0.3, compile_s=90)
        ses.screenshot("compiled")

        step = "09 export the compiled bundle (Ctrl+Shift+E)"
        ses.key("ctrl+shift+e")
        s = ses.wait_state("the folder dialog", lambda s: s.get("modal") and "FileDialog" in s["modal"]["class"]
                           and s["modal"].get("edits"), 20)
        time.sleep(0.5)  # the dialog maps and takes the keyboard focus
        ses.key("ctrl+a")
        ses.type(str(bundle))
        ses.wait_state("the folder typed", lambda s: s.get("modal") and str(bundle) in
                       [e["text"] for e in s["modal"]["edits"].values()], 10)
        ses.screenshot("export_folder")
        ses.key("Return")
        s = ses.wait_state("the export's 'Open the report?' question",
                           lambda s: s.get("modal") and "Open the report" in (s["modal"].get("text") or ""),
                           ses.compile_timeout)
        if not (bundle / "manifest.json").is_file():
            raise StepFailed(f"the export said it was done but {bundle}/manifest.json is missing")
        time.sleep(0.3)
        ses.screenshot("exported")
        ses.key("Escape")
        ses.wait_state("the question closed", lambda s: not s.get("modal"), 10)
        files = sorted(p.name for p in bundle.iterdir())
        say(f"bundle {bundle}: {', '.join(files)}")
        log_text = (work / "editor.log").read_text(errors="replace")
        if "Traceback" in log_text:
            raise StepFailed(f"the editor logged a traceback (see {work / 'editor.log'})")
        say(f"walkthrough: {ses.shot} screenshots in {out}")
        return 0
    except StepFailed as exc:
        with contextlib.suppress(Exception):  # the failure's message matters more than its picture
            ses.screenshot("FAILED")
        sys.stderr.write(f"error: step {step}: {exc} (editor log: {work / 'editor.log'})\n")
        return 1
    finally:
        ses.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="an ONNX model with dynamic inputs (default: a small one built here)")
    p.add_argument("--shape", default="1,3,64,64", help="the shape to type in the shape dialog")
    p.add_argument("--op", default="Relu", help="the op to drag from the palette")
    p.add_argument("--wire-from", default="conv2", help="the node whose output is wired to the dropped op")
    p.add_argument("--delete", default="add1", help="the node to delete (and undo)")
    p.add_argument("--pin", default="conv2", help="the node to pin to the CPU")
    p.add_argument("--out", default=str(ROOT / "assets" / "screenshots" / "walkthrough"))
    p.add_argument("--timeout", type=float, default=60.0, help="default seconds per wait")
    p.add_argument("--compile-timeout", type=float, default=600.0,
                   help="seconds for a wait that includes a compile (the editor's background analysis)")
    args = p.parse_args(argv)
    missing = sorted({pkg for tool, pkg in NEEDED.items() if shutil.which(tool) is None})
    if missing:
        sys.stderr.write(f"error: the walkthrough needs {', '.join(missing)}: apt-get install -y "
                         f"{' '.join(missing)} libxcb-icccm4 libxcb-keysyms1\n")
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
