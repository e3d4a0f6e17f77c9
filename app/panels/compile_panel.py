"""The compile pipeline panel: target (bundled profiles and files), calibration data with its
preprocessing, quantization settings and optimizer pass switches. Every change goes to the
AnalysisController, which recompiles in the background; the panel shows its progress with a
cancel button. Widgets keep no settings of their own: they are refreshed from the controller."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDockWidget,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app import placement
from app.progress import ProgressStrip
from engine.errors import InputError
from engine.quant.data import ImagePreprocess
from engine.quant.observers import METHODS

OTHER_FILE = "__file__"


def pass_names() -> list[str]:
    """The optimizer's passes in pipeline order (each once)."""
    from engine.passes.pipeline import DEFAULT_PIPELINE

    out: list[str] = []
    for item in DEFAULT_PIPELINE:
        for name in (item[1] if isinstance(item, tuple) else [item]):
            if name not in out:
                out.append(name)
    return out


def _floats(text: str) -> tuple[float, ...]:
    parts = [p for p in text.replace(";", ",").split(",") if p.strip()]
    return tuple(float(p) for p in parts)


STATE_CHARS = 60  # of the state message that fit the panel's two lines

class CompilePanel(QDockWidget):
    """See the module docstring."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Compile", parent)
        self.setObjectName("CompilePanel")
        self.controller: Any = None
        body = QWidget()
        lay = QVBoxLayout(body)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.addWidget(self._build_status())
        lay.addWidget(self._build_target())
        lay.addWidget(self._build_calibration())
        lay.addWidget(self._build_quant())
        lay.addWidget(self._build_passes())
        lay.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        for box in body.findChildren(QComboBox):
            box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            box.setMinimumContentsLength(6)
        for edit in body.findChildren(QLineEdit):
            edit.setMinimumWidth(60)
        scroll.setWidget(body)
        self.setWidget(scroll)

    # -- layout ----------------------------------------------------------------------------------
    def _build_status(self) -> QWidget:
        w = QWidget()
        lay = QVBoxLayout(w)
        lay.setContentsMargins(0, 0, 0, 0)
        self.state = QLabel("idle")
        self.state.setWordWrap(True)
        self.state.setFixedHeight(2 * self.state.fontMetrics().lineSpacing() + 4)  # no relayout per state
        lay.addWidget(self.state)
        self.progress = ProgressStrip(height=10)  # never a synchronous repaint (app/progress.py)
        self.progress.setRange(0, 1000)
        self.progress.setMaximumHeight(10)
        lay.addWidget(self.progress)
        row = QHBoxLayout()
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(lambda: self.controller and self.controller.cancel())
        self.compile_button = QPushButton("Compile")
        self.compile_button.setToolTip("Compile now (F5) instead of waiting for the next change")
        self.compile_button.clicked.connect(lambda: self.controller and self.controller.compile_now())
        row.addWidget(self.cancel_button)
        row.addWidget(self.compile_button)
        row.addStretch(1)
        lay.addLayout(row)
        return w

    def _build_target(self) -> QGroupBox:
        box = QGroupBox("Target")
        lay = QVBoxLayout(box)
        self.target_box = QComboBox()
        self.target_box.addItem("(none)", None)
        for name, desc in placement.list_targets():
            self.target_box.addItem(name, name)
            self.target_box.setItemData(self.target_box.count() - 1, desc, Qt.ItemDataRole.ToolTipRole)
        self.target_box.addItem("Target file…", OTHER_FILE)
        self.target_box.activated.connect(self._on_target_chosen)
        lay.addWidget(self.target_box)
        self.target_info = QLabel()
        self.target_info.setWordWrap(True)
        self.target_info.setStyleSheet("color: #5d6575;")
        lay.addWidget(self.target_info)
        return box

    def _build_calibration(self) -> QGroupBox:
        box = QGroupBox("Calibration data")
        lay = QVBoxLayout(box)
        self.calib_edit = QLineEdit()
        self.calib_edit.setPlaceholderText("none: synthetic random samples")
        self.calib_edit.editingFinished.connect(self._on_calibration_edited)
        lay.addWidget(self.calib_edit)
        row = QHBoxLayout()
        for text, tip, slot in (("File…", "an .npz of samples", self._on_calib_file),
                                ("Folder…", "a folder of images or .npy samples", self._on_calib_folder),
                                ("None", "synthetic random samples (the error figures are then not meaningful)",
                                 lambda: self._set_calibration(None))):
            b = QToolButton()
            b.setText(text)
            b.setToolTip(tip)
            b.clicked.connect(slot)
            row.addWidget(b)
        row.addStretch(1)
        lay.addLayout(row)
        self.pre_box = QGroupBox("Image preprocessing")
        form = QFormLayout(self.pre_box)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.resize_edit = QLineEdit()
        self.resize_edit.setPlaceholderText("model input size")
        self.mean_edit = QLineEdit("0")
        self.std_edit = QLineEdit("1")
        self.scale_spin = QDoubleSpinBox()
        self.scale_spin.setDecimals(5)
        self.scale_spin.setMinimumWidth(60)
        self.scale_spin.setRange(1e-6, 1e6)
        self.scale_spin.setValue(1 / 255)
        self.layout_box = QComboBox()
        self.layout_box.addItems(["NCHW", "NHWC"])
        self.channels_box = QComboBox()
        self.channels_box.addItems(["RGB", "BGR", "GRAY"])
        form.addRow("Resize (H, W)", self.resize_edit)
        form.addRow("Mean", self.mean_edit)
        form.addRow("Std", self.std_edit)
        form.addRow("Scale", self.scale_spin)
        form.addRow("Layout", self.layout_box)
        form.addRow("Channels", self.channels_box)
        for e in (self.resize_edit, self.mean_edit, self.std_edit):
            e.editingFinished.connect(self._on_calibration_edited)
        self.scale_spin.editingFinished.connect(self._on_calibration_edited)
        self.layout_box.activated.connect(self._on_calibration_edited)
        self.channels_box.activated.connect(self._on_calibration_edited)
        lay.addWidget(self.pre_box)
        self.calib_error = QLabel()
        self.calib_error.setWordWrap(True)
        self.calib_error.setStyleSheet("color: #c0392b;")
        self.calib_error.hide()
        lay.addWidget(self.calib_error)
        return box

    def _build_quant(self) -> QGroupBox:
        box = QGroupBox("Quantization")
        form = QFormLayout(box)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.method_box = QComboBox()
        self.method_box.addItems(list(METHODS))
        self.method_box.activated.connect(lambda _i: self._set_quant(method=self.method_box.currentText()))
        self.percentile_spin = QDoubleSpinBox()
        self.percentile_spin.setDecimals(3)
        self.percentile_spin.setRange(50.0, 100.0)
        self.percentile_spin.setSingleStep(0.01)
        self.percentile_spin.editingFinished.connect(lambda: self._set_quant(percentile=self.percentile_spin.value()))
        self.dtype_box = QComboBox()
        self.dtype_box.addItems(["int8", "uint8", "int16"])
        self.dtype_box.activated.connect(lambda _i: self._set_quant(dtype=self.dtype_box.currentText()))
        self.per_channel = QCheckBox("per channel")
        self.per_channel.setToolTip("one weight scale per output channel")
        self.per_channel.toggled.connect(lambda on: self._set_quant(per_channel=on))
        self.symmetric = QCheckBox("symmetric")
        self.symmetric.setToolTip("symmetric activation ranges (zero point 0)")
        self.symmetric.toggled.connect(lambda on: self._set_quant(symmetric=on))
        self.reduce_range = QCheckBox("7-bit weights")
        self.reduce_range.setToolTip("reduce range: 8-bit weights stored in 7 bits, for x86 CPUs without VNNI")
        self.reduce_range.toggled.connect(lambda on: self._set_quant(reduce_range=on))
        self.samples_spin = QSpinBox()
        self.samples_spin.setRange(1, 256)
        self.samples_spin.editingFinished.connect(
            lambda: self.controller and self.controller.update_settings(analysis_samples=self.samples_spin.value()))
        self.overrides = QLabel()
        self.overrides.setWordWrap(True)
        self.overrides.setStyleSheet("color: #5d6575;")
        form.addRow("Method", self.method_box)
        form.addRow("Percentile", self.percentile_spin)
        form.addRow("Type", self.dtype_box)
        form.addRow(self.per_channel)
        form.addRow(self.symmetric)
        form.addRow(self.reduce_range)
        form.addRow("Error samples", self.samples_spin)
        form.addRow(self.overrides)
        return box

    def _build_passes(self) -> QGroupBox:
        box = QGroupBox("Optimizer passes")
        lay = QVBoxLayout(box)
        self.pass_list = QListWidget()
        self.pass_list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.pass_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.pass_checks: dict[str, QListWidgetItem] = {}
        for name in pass_names():
            it = QListWidgetItem(name.replace("_", " "))
            it.setData(Qt.ItemDataRole.UserRole, name)
            it.setToolTip(name)
            it.setFlags(it.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            it.setCheckState(Qt.CheckState.Checked)
            self.pass_list.addItem(it)
            self.pass_checks[name] = it
        rows = len(self.pass_checks)
        self.pass_list.setFixedHeight(self.pass_list.sizeHintForRow(0) * rows + 6)
        self.pass_list.itemChanged.connect(self._on_pass_item_changed)
        lay.addWidget(self.pass_list)
        return box

    def _on_pass_item_changed(self, item: QListWidgetItem) -> None:
        if self.controller is not None:
            self.controller.set_pass_enabled(item.data(Qt.ItemDataRole.UserRole),
                                             item.checkState() == Qt.CheckState.Checked)

    # -- controller --------------------------------------------------------------------------------
    def set_controller(self, controller: Any) -> None:
        """Follow an AnalysisController."""
        self.controller = controller
        controller.settings_changed.connect(self._on_settings_changed)
        controller.state_changed.connect(self._on_state_changed)
        controller.progress.connect(self._on_progress)
        controller.hardware_changed.connect(self._on_hardware_changed)
        self._on_settings_changed(controller.settings)
        self._on_state_changed(controller.state, controller.message)

    def _on_settings_changed(self, s: Any) -> None:
        widgets = [self.target_box, self.calib_edit, self.method_box, self.percentile_spin, self.dtype_box,
                   self.per_channel, self.symmetric, self.reduce_range, self.samples_spin, self.pass_list]
        for w in widgets:
            w.blockSignals(True)
        idx = self.target_box.findData(s.target) if s.target else 0
        if idx < 0:
            self.target_box.insertItem(self.target_box.count() - 1, Path(s.target).name, s.target)
            idx = self.target_box.findData(s.target)
        self.target_box.setCurrentIndex(idx)
        self.calib_edit.setText(s.calibration or "")
        q = s.quant
        self.method_box.setCurrentText(q.method)
        self.percentile_spin.setValue(q.percentile)
        self.percentile_spin.setEnabled(q.method == "percentile")
        self.dtype_box.setCurrentText(q.dtype)
        self.per_channel.setChecked(q.per_channel)
        self.symmetric.setChecked(q.symmetric)
        self.reduce_range.setChecked(q.reduce_range)
        self.samples_spin.setValue(s.analysis_samples)
        for name, it in self.pass_checks.items():
            it.setCheckState(Qt.CheckState.Unchecked if name in s.disabled_passes else Qt.CheckState.Checked)
        pre = s.preprocess
        self.resize_edit.setText(", ".join(map(str, pre.resize)) if pre.resize else "")
        self.mean_edit.setText(", ".join(f"{v:g}" for v in pre.mean))
        self.std_edit.setText(", ".join(f"{v:g}" for v in pre.std))
        self.scale_spin.setValue(pre.scale)
        self.layout_box.setCurrentText(pre.layout)
        self.channels_box.setCurrentText(pre.channels)
        self.pre_box.setVisible(bool(s.calibration) and Path(s.calibration).is_dir())
        notes = [f"{t}: {m}" for t, m in sorted(q.method_overrides.items())]
        notes += [f"{n}: {p}" for n, p in sorted(q.precision.items())]
        self.overrides.setText(("Per-tensor and per-layer choices: " + "; ".join(notes)) if notes else "")
        for w in widgets:
            w.blockSignals(False)

    def _on_hardware_changed(self, target: Any) -> None:
        if target is None:
            self.target_info.setText("Choose a target to compile for.")
            return
        n = target.npu
        what_if = self.controller is not None and self.controller.hardware is not None
        self.target_info.setText(
            f"{target.description or target.name}<br>{n.rows}×{n.cols} MACs at {n.clock_mhz:g} MHz, {n.precision}, "
            f"{n.sram_kib:g} KiB SRAM, {n.dram_bandwidth_gbps:g} GB/s DRAM"
            + ("<br><b>modified in the Hardware panel (what-if)</b>" if what_if else ""))

    def _on_state_changed(self, state: str, message: str) -> None:
        running = state == "running"
        self.cancel_button.setEnabled(running)
        if not running:
            self.progress.setValue(0)
        color = {"failed": "#c0392b", "ready": "#12877a"}.get(state, "#5d6575")
        # Two fixed lines (no relayout per state): a long message is cut there, whole in the tooltip.
        short = message if len(message) <= STATE_CHARS else message[:STATE_CHARS - 1].rstrip() + "…"
        self.state.setText(f"<span style='color:{color}'><b>{state}</b></span> · {html.escape(short)}")
        self.state.setToolTip(message)

    def _on_progress(self, fraction: float, text: str) -> None:
        self.progress.setValue(int(1000 * max(0.0, min(1.0, fraction))))
        self.progress.setToolTip(text)  # not the state label: no relayout per update

    # -- gestures ----------------------------------------------------------------------------------
    def _on_target_chosen(self, _index: int) -> None:
        ctl = self.controller
        if ctl is None:
            return
        data = self.target_box.currentData()
        if data == OTHER_FILE:
            path, _ = QFileDialog.getOpenFileName(self, "Hardware target", "", "Target profiles (*.yaml *.yml)")
            if not path:
                self._on_settings_changed(ctl.settings)
                return
            data = path
        ctl.set_target(data)

    def _on_calib_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Calibration data", "", "Calibration samples (*.npz)")
        if path:
            self._set_calibration(path)

    def _on_calib_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Folder of calibration images or .npy samples")
        if path:
            self._set_calibration(path)

    def _on_calibration_edited(self) -> None:
        self._set_calibration(self.calib_edit.text().strip() or None)

    def preprocess(self) -> ImagePreprocess:
        """The preprocessing the fields describe (raises InputError when a field is wrong)."""
        try:
            resize = _floats(self.resize_edit.text())
            mean, std = _floats(self.mean_edit.text()) or (0.0,), _floats(self.std_edit.text()) or (1.0,)
        except ValueError:
            raise InputError("resize, mean and std take numbers separated by commas") from None
        if resize and len(resize) != 2:
            raise InputError("resize takes two numbers: H, W")
        size = (int(resize[0]), int(resize[1])) if resize else None
        return ImagePreprocess(resize=size, mean=mean, std=std, scale=self.scale_spin.value(),
                               layout=self.layout_box.currentText(), channels=self.channels_box.currentText())

    def _set_calibration(self, path: str | None) -> None:
        if self.controller is None:
            return
        try:
            pre = self.preprocess()
        except InputError as exc:
            self.calib_error.setText(str(exc))
            self.calib_error.show()
            return
        if path and not Path(path).exists():
            self.calib_error.setText(f"{path}: no such file or folder")
            self.calib_error.show()
            return
        self.calib_error.hide()
        self.controller.set_calibration(path, pre)

    def _set_quant(self, **changes: Any) -> None:
        if self.controller is not None:
            try:
                self.controller.set_quant(**changes)
            except InputError as exc:
                self.calib_error.setText(str(exc))
                self.calib_error.show()
