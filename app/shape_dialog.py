"""The shape dialog: a model with dynamic input dimensions asks for them when it is opened.

One row per input with a dynamic (or unknown) dimension, prefilled from the last shapes used
for that file, else from the model's hints (its static dimensions, batch 1, a square image of
``IMAGE_SIDE`` for 4-D image inputs); each row is validated as it is typed (a positive integer
per dimension, the model's static dimensions kept) and OK is enabled only when every row is
valid. ``parse_shape`` is the same rule for ``--shape``-style text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

IMAGE_SIDE = 224
SETTINGS_KEY = "shapes/"


def dynamic_inputs(graph: Any) -> list[tuple[str, tuple]]:
    """(name, dims) of every graph input whose shape is not fully static (dims may hold None
    or symbols; an unknown rank is ``()``)."""
    out = []
    for v in graph.inputs:
        shape = v.type.shape
        if shape is None:
            out.append((v.name, ()))
        elif not all(isinstance(d, int) and d >= 0 for d in shape):
            out.append((v.name, tuple(shape)))
    return out


def hint(dims: tuple) -> tuple[int, ...]:
    """A shape to start from: static dimensions kept, batch 1, image sides IMAGE_SIDE, else 1."""
    if not dims:
        return ()
    image = len(dims) == 4 and dims[1] in (1, 3, 4)
    out = []
    for k, d in enumerate(dims):
        if isinstance(d, int) and d > 0:
            out.append(d)
        elif k == 0:
            out.append(1)
        else:
            out.append(IMAGE_SIDE if image and k >= 2 else 1)
    return tuple(out)


def parse_shape(text: str, dims: tuple) -> tuple[tuple[int, ...] | None, str]:
    """(shape, "") when ``text`` is a valid shape for an input declared ``dims``, else (None, why)."""
    parts = [p.strip() for p in text.replace("x", ",").split(",") if p.strip()]
    if not parts:
        return None, "give one positive integer per dimension, e.g. 1,3,224,224"
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        return None, f"{text.strip()!r} is not a list of integers"
    if any(d <= 0 for d in shape):
        return None, "every dimension must be at least 1"
    if dims and len(shape) != len(dims):
        return None, f"the model declares {len(dims)} dimensions, this has {len(shape)}"
    for k, (want, got) in enumerate(zip(dims, shape, strict=False)):
        if isinstance(want, int) and want > 0 and want != got:
            return None, f"dimension {k} is fixed at {want} by the model"
    return shape, ""


def remembered(settings: Any, path: Path) -> dict[str, tuple[int, ...]]:
    """The shapes last used for the model at ``path`` (empty when none)."""
    raw = settings.value(SETTINGS_KEY + str(Path(path).resolve()).replace("/", "|"))
    try:
        data = json.loads(str(raw)) if raw else {}
        return {str(k): tuple(int(d) for d in v) for k, v in data.items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def remember(settings: Any, path: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    """Keep ``shapes`` as the last ones used for the model at ``path``."""
    settings.setValue(SETTINGS_KEY + str(Path(path).resolve()).replace("/", "|"),
                      json.dumps({k: list(v) for k, v in shapes.items()}))


class ShapeDialog(QDialog):
    """See the module docstring."""

    def __init__(self, model_name: str, inputs: list[tuple[str, tuple]], last: dict[str, tuple[int, ...]],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Input shapes")
        self.inputs = inputs
        lay = QVBoxLayout(self)
        intro = QLabel(f"<b>{model_name}</b> has dynamic input dimensions. Placement and simulation need "
                       "concrete shapes: give one per input (comma-separated, e.g. 1,3,640,640).")
        intro.setWordWrap(True)
        lay.addWidget(intro)
        form = QFormLayout()
        self.edits: dict[str, QLineEdit] = {}
        self.errors: dict[str, QLabel] = {}
        for name, dims in inputs:
            edit = QLineEdit(",".join(str(d) for d in last.get(name) or hint(dims)))
            edit.setObjectName(f"shape:{name}")
            declared = "x".join("?" if not isinstance(d, int) or d < 0 else str(d) for d in dims) or "unknown"
            edit.setToolTip(f"declared: {declared}")
            err = QLabel("")
            err.setStyleSheet("color: #b3261e;")
            edit.textChanged.connect(self._validate)
            form.addRow(f"{name}  [{declared}]", edit)
            form.addRow("", err)
            self.edits[name], self.errors[name] = edit, err
        lay.addLayout(form)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        lay.addWidget(self.buttons)
        self._validate()

    def _validate(self) -> None:
        ok = True
        for name, dims in self.inputs:
            shape, why = parse_shape(self.edits[name].text(), dims)
            self.errors[name].setText(why)
            self.errors[name].setVisible(bool(why))
            ok = ok and shape is not None
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(ok)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """The shapes typed (every row valid; call after the dialog was accepted)."""
        out = {}
        for name, dims in self.inputs:
            shape, _ = parse_shape(self.edits[name].text(), dims)
            if shape is not None:
                out[name] = shape
        return out
