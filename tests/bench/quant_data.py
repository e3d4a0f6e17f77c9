"""Real models and real data for the quantization benchmark, calibration and held-out apart.

- PP-OCRv6 rec small (rapidocr 3.10.0) at 1x3x48x320, fed text crops of skimage's text() and
  page(): windows of random height (24-63 px) at the model's 48:320 aspect, resized to 48x320,
  grey repeated to 3 channels, normalized to [-1, 1] as PaddleOCR's recognizer expects.
  Calibration crops and held-out crops come from different random seeds.
- mobilenet_demo, calibrated on the 12 images of assets/data/images (resized whole, as
  `quantize --calib assets/data/images` does), judged on held-out random crops (60-95 % of the
  short side) of the same photos, resized to 96x96 the same way (PIL bilinear, 0..1 RGB NCHW).
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import onnx

from tests.models import ASSETS

SITE = Path(sysconfig.get_paths()["purelib"])
REC_MODEL = SITE / "rapidocr" / "models" / "PP-OCRv6_rec_small.onnx"
REC_SHAPE = (1, 3, 48, 320)


def rec_model(dest: Path) -> Path:
    """The recognizer with its input fixed at 1x3x48x320 (written to ``dest`` once)."""
    return fixed_input(REC_MODEL, REC_SHAPE, dest)


def fixed_input(src: Path, shape: tuple[int, ...], dest: Path, min_opset: int | None = None) -> Path:
    """``src`` with its first input fixed at ``shape``, output dims left to inference and, with
    ``min_opset``, converted up to that opset (onnxruntime's per-channel QDQ needs 13); written
    to ``dest`` once."""
    if dest.exists():
        return dest
    m = onnx.load(str(src))
    for d, v in zip(m.graph.input[0].type.tensor_type.shape.dim, shape):
        d.Clear()
        d.dim_value = v
    for o in m.graph.output:
        for d in o.type.tensor_type.shape.dim:
            if not d.HasField("dim_value") or d.dim_value < 0:
                d.Clear()
    del m.graph.value_info[:]
    if min_opset is not None and max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) < min_opset:
        from onnx import version_converter

        m = version_converter.convert_version(m, min_opset)
    onnx.save(m, str(dest))
    return dest


def text_crops(n: int, seed: int) -> np.ndarray:
    """(n, 1, 3, 48, 320) float32 text crops in [-1, 1]."""
    from skimage import data, transform

    rng = np.random.default_rng(seed)
    pages = [data.text().astype(np.float32) / 255.0, data.page().astype(np.float32) / 255.0]
    out = []
    for k in range(n):
        im = pages[k % 2]
        h_img, w_img = im.shape
        h = int(rng.integers(24, min(64, h_img)))
        w = min(w_img, int(h * REC_SHAPE[3] / REC_SHAPE[2]))
        y, x = int(rng.integers(0, h_img - h + 1)), int(rng.integers(0, w_img - w + 1))
        crop = transform.resize(im[y:y + h, x:x + w], REC_SHAPE[2:])
        out.append(np.repeat(crop[None, None], 3, axis=1))
    return ((np.concatenate(out).astype(np.float32) - 0.5) / 0.5)[:, None]


def photo_crops(n: int, seed: int, size: tuple[int, int] = (96, 96)) -> np.ndarray:
    """(n, 1, 3, H, W) float32 random crops of the bundled photos, 0..1 RGB."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    files = sorted((ASSETS / "data" / "images").glob("*.png"))
    out = []
    for k in range(n):
        im = Image.open(files[k % len(files)]).convert("RGB")
        w, h = im.size
        side = int(min(w, h) * rng.uniform(0.6, 0.95))
        x, y = int(rng.integers(0, w - side + 1)), int(rng.integers(0, h - side + 1))
        crop = im.crop((x, y, x + side, y + side)).resize((size[1], size[0]), Image.Resampling.BILINEAR)
        out.append(np.asarray(crop, np.float32).transpose(2, 0, 1)[None] / 255.0)
    return np.stack(out).astype(np.float32)
