"""Hardware what-if: sliders for the target's main parameters (MAC array size, clock, SRAM,
DRAM bandwidth, CPU<->NPU link bandwidth, dispatch overhead). Moving one re-simulates the
compiled graph on the modified target (no recompile: the cost model is cheap), and a sweep
chart shows the latency across that slider's whole range with the current value marked and
each point coloured by whether the NPU work is mostly memory- or compute-bound. The modified
target can be saved as a new target YAML."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyqtgraph as pg
import yaml
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from app import style
from app.analysis_jobs import sweep_job
from app.panels.chart_base import NPU, SELECTION, fmt_us, make_plot
from app.worker_process import ProcessTask
from engine.errors import InputError
from engine.hw.target import HardwareTarget, load_target

MEMORY_BOUND = style.GROUP_FRAME
SWEEP_DELAY_MS = 250


def with_array(t: HardwareTarget, macs: float) -> HardwareTarget:
    """The target with a MAC array of ``macs`` MACs per cycle (near-square, same rate per PE)."""
    n = t.npu
    old = n.rows * n.cols
    macs = max(1, round(macs))
    if macs == old:
        return t
    rows = 2 ** int(math.log2(macs) // 2) if macs > 1 else 1
    cols = max(1, macs // rows)
    scale = rows * cols / old
    return t.with_npu(rows=rows, cols=cols, precisions={k: v * scale for k, v in n.precisions.items()})


def with_clock(t: HardwareTarget, mhz: float) -> HardwareTarget:
    """The target at another peak clock (the sustained clock scales with it)."""
    if mhz == t.npu.clock_mhz:
        return t
    th = dataclasses.replace(t.thermal, sustained_clock_mhz=t.thermal.sustained_clock_mhz * mhz / t.npu.clock_mhz)
    return dataclasses.replace(t.with_npu(clock_mhz=mhz), thermal=th, _cache={})


def with_transfer(t: HardwareTarget, gbps: float) -> HardwareTarget:
    """The target with another CPU<->NPU link bandwidth."""
    if gbps == t.transfer.bandwidth_gbps:
        return t
    return dataclasses.replace(t, transfer=dataclasses.replace(t.transfer, bandwidth_gbps=gbps), _cache={})


@dataclass(frozen=True)
class HardwareKnob:
    """One slider: the values it offers, how to read it from and write it into a target."""

    key: str
    label: str
    unit: str
    values: tuple[float, ...]
    read: Callable[[HardwareTarget], float]
    write: Callable[[HardwareTarget, float], HardwareTarget]

    def choices(self, base: HardwareTarget) -> list[float]:
        """The offered values with the base target's own value among them."""
        return sorted({*self.values, float(self.read(base))})


def _npu(field: str) -> Callable[[HardwareTarget, float], HardwareTarget]:
    return lambda t, v: t if getattr(t.npu, field) == v else t.with_npu(**{field: v})


KNOBS: tuple[HardwareKnob, ...] = (
    HardwareKnob("macs", "MAC array", "MACs/cycle", tuple(2.0 ** k for k in range(4, 17)),
                 lambda t: float(t.npu.rows * t.npu.cols), with_array),
    HardwareKnob("clock", "NPU clock", "MHz", (100, 200, 300, 400, 500, 600, 800, 1000, 1200, 1500, 2000),
                 lambda t: float(t.npu.clock_mhz), with_clock),
    HardwareKnob("sram", "SRAM", "KiB", tuple(2.0 ** k for k in range(4, 16)), lambda t: float(t.npu.sram_kib),
                 _npu("sram_kib")),
    HardwareKnob("dram", "DRAM bandwidth", "GB/s", (0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
                 lambda t: float(t.npu.dram_bandwidth_gbps), _npu("dram_bandwidth_gbps")),
    HardwareKnob("link", "CPU↔NPU link", "GB/s", (0.25, 0.5, 1, 2, 4, 8, 16, 32, 64),
                 lambda t: float(t.transfer.bandwidth_gbps), with_transfer),
    HardwareKnob("dispatch", "Dispatch overhead", "µs", (0, 1, 2, 5, 10, 20, 40, 80, 160),
                 lambda t: float(t.npu.dispatch_overhead_us), _npu("dispatch_overhead_us")),
)


def apply_knobs(base: HardwareTarget, values: dict[str, float]) -> HardwareTarget:
    """``base`` with every knob set to ``values`` (knobs absent keep the base value)."""
    t = base
    for k in KNOBS:
        if k.key in values:
            t = k.write(t, values[k.key])
    return t


def target_document(base: HardwareTarget, target: HardwareTarget, name: str) -> dict:
    """The YAML document of ``target``: the base profile's file with the knobs' fields changed."""
    src = Path(base.source)
    doc = yaml.safe_load(src.read_text(encoding="utf-8")) if src.is_file() else None
    if not isinstance(doc, dict):
        raise InputError(f"{base.source}: the base target's YAML cannot be read")
    n = target.npu
    doc["name"] = name
    doc["description"] = f"{doc.get('description') or base.name} (modified in NPU Studio)"
    npu = doc.setdefault("npu", {})
    npu["array"] = {**(npu.get("array") or {}), "rows": n.rows, "cols": n.cols}
    npu["precisions"] = {k: (int(v) if float(v).is_integer() else float(v)) for k, v in n.precisions.items()}
    for f in ("clock_mhz", "sram_kib", "dram_bandwidth_gbps", "dispatch_overhead_us"):
        v = float(getattr(n, f))
        npu[f] = int(v) if v.is_integer() else v
    doc.setdefault("transfer", {})["bandwidth_gbps"] = target.transfer.bandwidth_gbps
    doc.setdefault("thermal", {})["sustained_clock_mhz"] = round(target.thermal.sustained_clock_mhz, 3)
    return doc


def save_target_yaml(base: HardwareTarget, target: HardwareTarget, path: str | Path) -> HardwareTarget:
    """Write ``target`` as a target YAML at ``path`` and load it back (validated)."""
    path = Path(path)
    doc = target_document(base, target, path.stem)
    text = f"# {path.stem}: {base.name} with its parameters changed in NPU Studio's hardware what-if\n"
    path.write_text(text + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return load_target(path)


class TargetPanel(QDockWidget):
    """See the module docstring."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Hardware", parent)
        self.setObjectName("TargetPanel")
        self.controller: Any = None
        self.base: HardwareTarget | None = None
        self.values: dict[str, float] = {}
        self.active = "dram"
        self.sweep: list[tuple[float, float, float]] = []
        self._sweep_key = ""
        self._sweep_dirty = False  # a new result came while the panel was hidden
        self._task: ProcessTask | None = None
        self._sweep_timer = QTimer(self)
        self._sweep_timer.setSingleShot(True)
        self._sweep_timer.setInterval(SWEEP_DELAY_MS)
        self._sweep_timer.timeout.connect(self._start_sweep)
        body = QWidget()
        outer = QHBoxLayout(body)
        outer.setContentsMargins(6, 6, 6, 6)
        left = QVBoxLayout()
        grid = QGridLayout()
        self.sliders: dict[str, QSlider] = {}
        self.value_labels: dict[str, QLabel] = {}
        for r, k in enumerate(KNOBS):
            grid.addWidget(QLabel(k.label), r, 0)
            s = QSlider(Qt.Orientation.Horizontal)
            s.setMinimumWidth(160)
            s.setPageStep(1)
            s.valueChanged.connect(lambda i, key=k.key: self._on_slider_changed(key, i))
            s.sliderPressed.connect(lambda key=k.key: self._set_active(key))
            grid.addWidget(s, r, 1)
            lab = QLabel()
            lab.setMinimumWidth(120)
            grid.addWidget(lab, r, 2)
            self.sliders[k.key], self.value_labels[k.key] = s, lab
        left.addLayout(grid)
        row = QHBoxLayout()
        self.reset_button = QPushButton("Reset")
        self.reset_button.clicked.connect(self.reset)
        self.save_button = QPushButton("Save as target YAML…")
        self.save_button.clicked.connect(self._on_save_clicked)
        row.addWidget(self.reset_button)
        row.addWidget(self.save_button)
        row.addStretch(1)
        left.addLayout(row)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        left.addWidget(self.summary)
        left.addStretch(1)
        right = QVBoxLayout()
        self.sweep_title = QLabel()
        self.sweep_title.setWordWrap(True)
        right.addWidget(self.sweep_title)
        self.plot = make_plot()
        pi = self.plot.getPlotItem()
        pi.setLabel("left", "latency (µs)")  # x holds log10 of the value; ticks name the values
        pi.showGrid(x=True, y=True, alpha=0.15)
        right.addWidget(self.plot, 1)
        outer.addLayout(left, 2)
        outer.addLayout(right, 3)
        self.setWidget(body)
        self._set_enabled(False)

    def _set_enabled(self, on: bool) -> None:
        for s in self.sliders.values():
            s.setEnabled(on)
        self.reset_button.setEnabled(on)
        self.save_button.setEnabled(on)

    # -- controller --------------------------------------------------------------------------------
    def set_controller(self, controller: Any) -> None:
        """Follow an AnalysisController."""
        self.controller = controller
        controller.hardware_changed.connect(self._on_hardware_changed)
        controller.result_changed.connect(self._on_result_changed)

    def _on_hardware_changed(self, _target: Any) -> None:
        ctl = self.controller
        base = ctl.base_target if ctl is not None else None
        if base is not self.base:
            self.base = base
            self.values = {k.key: k.read(base) for k in KNOBS} if base is not None else {}
            self._sync_sliders()
        self._set_enabled(base is not None)

    def _sync_sliders(self) -> None:
        for k in KNOBS:
            s = self.sliders[k.key]
            s.blockSignals(True)
            if self.base is None:
                s.setRange(0, 0)
            else:
                choices = k.choices(self.base)
                s.setRange(0, len(choices) - 1)
                s.setValue(choices.index(min(choices, key=lambda v, k=k: abs(v - self.values[k.key]))))
            s.blockSignals(False)
            self._show_value(k)

    def _show_value(self, k: HardwareKnob) -> None:
        if self.base is None:
            self.value_labels[k.key].setText("")
            return
        v, b = self.values[k.key], k.read(self.base)
        changed = abs(v - b) > 1e-9
        self.value_labels[k.key].setText(f"<b>{v:g}</b> {k.unit}" if changed else f"{v:g} {k.unit}")

    def _on_result_changed(self, _result: Any) -> None:
        if self.base is not None:
            self._sweep_dirty = True
            if self.isVisible():
                self._sweep_timer.start()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._sweep_dirty:
            self._sweep_timer.start()

    # -- gestures ----------------------------------------------------------------------------------
    def _set_active(self, key: str) -> None:
        if key != self.active:
            self.active = key
            self._sweep_timer.start()

    def _on_slider_changed(self, key: str, index: int) -> None:
        if self.base is None:
            return
        knob = next(k for k in KNOBS if k.key == key)
        self.values[key] = knob.choices(self.base)[index]
        self._show_value(knob)
        self.active = key
        self.apply()

    def set_value(self, key: str, value: float) -> None:
        """Move a slider to the offered value nearest ``value`` (what dragging it does)."""
        knob = next(k for k in KNOBS if k.key == key)
        choices = knob.choices(self.base) if self.base is not None else [value]
        self.sliders[key].setValue(choices.index(min(choices, key=lambda v: abs(v - value))))

    def modified_target(self) -> HardwareTarget | None:
        """The base target with the sliders' values (None when unchanged or no target)."""
        if self.base is None:
            return None
        t = apply_knobs(self.base, self.values)
        return None if t is self.base else t

    def apply(self) -> None:
        """Re-simulate on the sliders' target (live, no recompile)."""
        if self.controller is None:
            return
        self.controller.set_hardware(self.modified_target())
        self._sweep_timer.start()

    def reset(self) -> None:
        """Back to the chosen target's own values."""
        if self.base is None:
            return
        self.values = {k.key: k.read(self.base) for k in KNOBS}
        self._sync_sliders()
        self.apply()

    # -- sweep -------------------------------------------------------------------------------------
    @property
    def sweeping(self) -> bool:
        """True while a sweep is pending or running."""
        return self._task is not None or self._sweep_timer.isActive()

    def _start_sweep(self) -> None:
        ctl = self.controller
        if ctl is None or ctl.current is None or self.base is None:
            return
        self._sweep_dirty = False
        knob = next(k for k in KNOBS if k.key == self.active)
        targets = [(v, apply_knobs(self.base, {**self.values, knob.key: v})) for v in knob.choices(self.base)]
        if self._task is not None:
            self._task.cancel()
        task = ProcessTask(sweep_job, ctl.current, targets, name="sweep")
        task.signals.finished.connect(self._on_sweep_done)
        self._sweep_key = knob.key
        self._task = task.start()

    def _on_sweep_done(self, points: list[tuple[float, float, float]]) -> None:
        self._task = None
        key = self._sweep_key
        if key != self.active:
            return
        self.sweep = points
        knob = next(k for k in KNOBS if k.key == key)
        pi = self.plot.getPlotItem()
        pi.clear()
        floor = min((v for v in knob.choices(self.base) if v > 0), default=1.0) / 2
        xs = [math.log10(p[0] if p[0] > 0 else floor) for p in points]
        ys = [p[1] for p in points]
        pi.plot(xs, ys, pen=pg.mkPen(style.EDGE, width=1.5))
        for want_mem, color in ((True, MEMORY_BOUND), (False, NPU)):
            pts = [(x, y) for x, y, p in zip(xs, ys, points) if (p[2] >= 0.5) == want_mem]
            if pts:
                pi.addItem(pg.ScatterPlotItem([p[0] for p in pts], [p[1] for p in pts], size=8,
                                              brush=pg.mkBrush(color), pen=pg.mkPen(color.darker(120))))
        cur = self.values[key]
        cx = math.log10(cur if cur > 0 else floor)
        cy = next((y for p, y in zip(points, ys) if abs(p[0] - cur) < 1e-9), None)
        pi.addItem(pg.InfiniteLine(pos=cx, angle=90, pen=pg.mkPen(SELECTION, width=1.5),
                                   label="current", labelOpts={"position": 0.08, "color": SELECTION}))
        if cy is not None:
            pi.addItem(pg.ScatterPlotItem([cx], [cy], size=14, symbol="o", brush=pg.mkBrush(None),
                                          pen=pg.mkPen(SELECTION, width=2.5)))
        pi.setLabel("bottom", f"{knob.label} ({knob.unit})")
        pi.getAxis("bottom").setTicks([[(x, f"{p[0]:g}") for x, p in zip(xs, points)]])
        pi.setYRange(0, max(ys) * 1.1 if ys else 1.0, padding=0)
        cross = next((p[0] for p in points if p[2] < 0.5), None) if points and points[0][2] >= 0.5 else None
        note = f"; the NPU stops being memory-bound from about {cross:g} {knob.unit}" if cross is not None else ""
        self.sweep_title.setText(
            f"<b>Latency across {knob.label}</b> ({len(points)} simulations){note}<br>"
            f"<span style='color:{MEMORY_BOUND.name()}'>●</span> NPU time mostly memory-bound &nbsp; "
            f"<span style='color:{NPU.name()}'>●</span> mostly compute-bound &nbsp; "
            f"<span style='color:{SELECTION.name()}'>○</span> the slider's value")
        ctl = self.controller
        if ctl is not None and ctl.current is not None:
            res = ctl.current
            self.summary.setText(f"Simulated latency now: <b>{fmt_us(res.latency_us)}</b>"
                                 + (" on the modified target" if ctl.hardware is not None else ""))

    # -- saving ------------------------------------------------------------------------------------
    def _on_save_clicked(self) -> None:
        if self.base is None:
            return
        start = str(Path(self.base.source).with_name(f"{self.base.name}-custom.yaml"))
        path, _ = QFileDialog.getSaveFileName(self, "Save target YAML", start, "Target profiles (*.yaml)")
        if not path:
            return
        try:
            saved = self.save(path)
        except (InputError, OSError) as exc:
            QMessageBox.warning(self, "NPU Studio", str(exc))
            return
        answer = QMessageBox.question(self, "Target saved", f"Saved {saved.name} to {path}. Compile for it now?")
        if answer == QMessageBox.StandardButton.Yes and self.controller is not None:
            self.controller.set_target(path)

    def save(self, path: str | Path) -> HardwareTarget:
        """Write the sliders' target to ``path`` (validated by loading it back)."""
        assert self.base is not None
        return save_target_yaml(self.base, apply_knobs(self.base, self.values), path)
