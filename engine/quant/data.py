"""Calibration data: .npz stacks, folders of .npy samples, folders of images with preprocessing.

A CalibrationSet yields one feed dict (input name -> array of the input's shape) per sample,
lazily for folders, so calibration memory does not grow with the number of image files.
Every problem is an InputError naming the file (and key or sample) and what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import InputError
from engine.ir.graph import Graph, Value
from engine.sim.feeds import read_npz
from nodes.types import dtype_name

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


@dataclass(frozen=True)
class ImagePreprocess:
    """How image files become model inputs (defaults suit a 0..1 RGB NCHW model)."""

    resize: tuple[int, int] | None = None  # (H, W); default: the model input's spatial size
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    scale: float = 1.0 / 255.0
    layout: str = "NCHW"
    channels: str = "RGB"

    def __post_init__(self) -> None:
        if self.layout not in ("NCHW", "NHWC"):
            raise InputError(f"--layout must be NCHW or NHWC, got {self.layout!r}")
        if self.channels not in ("RGB", "BGR", "GRAY"):
            raise InputError(f"--channels must be RGB, BGR or GRAY, got {self.channels!r}")
        if any(s == 0 for s in self.std):
            raise InputError("--std must not contain 0")


@dataclass(frozen=True)
class CalibLimits:
    """Bounds on calibration data so a huge folder or file cannot exhaust the machine."""

    max_samples: int = 10_000
    max_bytes: int = 4 * 1024**3
    max_sample_bytes: int = 1024**3  # one preprocessed image (--resize) at most
    max_image_pixels: int = 50_000_000  # a header claiming more is refused before decoding


class CalibrationSet:
    """An iterable of feed dicts with a known length and a description of where they came from."""

    def __init__(self, source: str, count: int, make: Callable[[int], dict[str, np.ndarray]],
                 groups: list[str] | None = None) -> None:
        self.source = source
        self._count = count
        self._make = make
        self.groups = groups
        """The picture each sample shows, when the source says (an image folder), else None: held-out
        samples are spread over the pictures (engine/quant/split.py)."""

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for i in range(self._count):
            yield self._make(i)

    def sample(self, i: int) -> dict[str, np.ndarray]:
        """Feed dict of sample ``i``."""
        return self._make(i)

    def take(self, n: int) -> CalibrationSet:
        """The first ``n`` samples."""
        return self.subset(list(range(min(n, self._count))))

    def subset(self, idx: list[int]) -> CalibrationSet:
        """The samples ``idx``, in that order (their pictures kept)."""
        return CalibrationSet(self.source, len(idx), lambda i: self._make(idx[i]),
                              [self.groups[i] for i in idx] if self.groups is not None else None)

    @staticmethod
    def from_arrays(source: str, arrays: dict[str, np.ndarray]) -> CalibrationSet:
        """Samples stacked on a leading axis, one array per input name."""
        n = len(next(iter(arrays.values()))) if arrays else 0
        return CalibrationSet(source, n, lambda i: {k: v[i] for k, v in arrays.items()})


def _check_sample(arr: np.ndarray, inp: Value, where: str) -> np.ndarray:
    shape = inp.type.shape
    if arr.dtype.kind not in "biuf":
        raise InputError(f"{where}: dtype {arr.dtype} is not numeric")
    if shape is not None:
        if arr.ndim != len(shape):
            raise InputError(f"{where}: sample shape {tuple(arr.shape)} does not fit input {inp.name!r} "
                             f"of shape {tuple(shape)} (rank {arr.ndim} vs {len(shape)})")
        for k, (want, got) in enumerate(zip(shape, arr.shape)):
            if isinstance(want, int) and want != got:
                raise InputError(f"{where}: sample shape {tuple(arr.shape)} does not fit input {inp.name!r} "
                                 f"of shape {tuple(shape)} (dimension {k})")
    want_dt = inp.type.dtype
    if want_dt is not None and arr.dtype != want_dt:
        if want_dt.kind == "f" or (arr.dtype.kind in "biu" and want_dt.kind in "iu"):
            arr = arr.astype(want_dt)
        else:
            raise InputError(f"{where}: dtype {arr.dtype} does not fit input {inp.name!r} ({dtype_name(want_dt)})")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = int(np.size(arr) - np.isfinite(arr).sum())
        raise InputError(f"{where}: holds {bad} NaN or infinite value(s)")
    return arr


def load_npz(path: Path, graph: Graph, limits: CalibLimits) -> CalibrationSet:
    """Arrays keyed by input name, samples stacked on a new leading axis: (N, *input_shape)."""
    if path.stat().st_size > limits.max_bytes:
        raise InputError(f"{path}: {path.stat().st_size} bytes is over the calibration limit of {limits.max_bytes}")
    arrays = read_npz(path, "--calib")
    inputs = {v.name: v for v in list(graph.inputs)}
    for k in arrays:
        if k not in inputs:
            raise InputError(f"{path}: key {k!r} is not a model input (inputs: {', '.join(inputs)})")
    for name in inputs:
        if name not in arrays:
            raise InputError(f"{path}: no array for input {name!r} (keys: {', '.join(arrays) or 'none'})")
    counts = {k: (len(a) if a.ndim else 0) for k, a in arrays.items()}
    if len(set(counts.values())) != 1:
        raise InputError(f"{path}: inputs have different sample counts {counts}")
    n = next(iter(counts.values()))
    if n == 0:
        raise InputError(f"{path}: holds no samples (arrays must stack samples on a leading axis)")
    if n > limits.max_samples:
        raise InputError(f"{path}: {n} samples is over the limit of {limits.max_samples}")
    for k, a in arrays.items():
        try:
            checked = _check_sample(a[0], inputs[k], f"{path}: key {k!r} sample 0")
        except InputError as exc:
            if a.ndim == len(inputs[k].type.shape or ()):
                raise InputError(f"{exc} - stack samples on a new leading axis: (N, *input_shape)") from None
            raise
        arrays[k] = a.astype(checked.dtype, copy=False)
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            idx = int(np.nonzero(~np.isfinite(a.reshape(len(a), -1)).all(axis=1))[0][0])
            raise InputError(f"{path}: key {k!r} sample {idx} holds NaN or infinite values")
    return CalibrationSet.from_arrays(str(path), arrays)


def load_npy_folder(path: Path, graph: Graph, limits: CalibLimits) -> CalibrationSet:
    """One .npy file per sample; only for single-input models."""
    files = sorted(p for p in path.iterdir() if p.suffix == ".npy")
    inputs = list(graph.inputs)
    if len(inputs) != 1:
        raise InputError(f"{path}: a folder of .npy samples needs a single-input model "
                         f"(this one has {len(inputs)}); use an .npz keyed by input name")
    inp = inputs[0]
    if len(files) > limits.max_samples:
        raise InputError(f"{path}: {len(files)} samples is over the limit of {limits.max_samples}")
    total = sum(p.stat().st_size for p in files)
    if total > limits.max_bytes:
        raise InputError(f"{path}: {total} bytes of samples is over the calibration limit of {limits.max_bytes}")

    def make(i: int) -> dict[str, np.ndarray]:
        f = files[i]
        try:
            arr = np.load(f, allow_pickle=False)
        except Exception as exc:
            raise InputError(f"{f}: cannot read as .npy: {type(exc).__name__}") from None
        shape = inp.type.shape or ()
        if arr.ndim == len(shape) - 1 and shape and shape[0] == 1:
            arr = arr[None]
        return {inp.name: _check_sample(arr, inp, str(f))}

    make(0)  # fail early on a bad first file
    return CalibrationSet(str(path), len(files), make)


def _open_image(path: Path, max_pixels: int):
    """A PIL image whose header was read and whose pixel count is within ``max_pixels``."""
    import warnings

    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(path)
    except Image.DecompressionBombError:
        raise InputError(f"{path}: the image header claims more pixels than the budget of "
                         f"{max_pixels:,} pixels (a decompression bomb?)") from None
    except Exception as exc:  # PIL raises many types for a broken header
        raise InputError(f"{path}: not a readable image ({type(exc).__name__})") from None
    w, h = im.size
    if w * h > max_pixels:
        im.close()
        raise InputError(f"{path}: the image header claims {w}x{h} pixels, over the budget of "
                         f"{max_pixels:,} pixels; nothing was decoded")
    return im


def load_image(path: Path, inp: Value, pre: ImagePreprocess,
               max_pixels: int = CalibLimits.max_image_pixels) -> np.ndarray:
    """Decode and preprocess one image into the input's layout (batch dim included)."""
    from PIL import Image

    shape = inp.type.shape
    if shape is None or len(shape) != 4:
        raise InputError(f"{path}: images need a rank-4 image input; {inp.name!r} has shape {shape}")
    if pre.layout == "NCHW":
        c, h, w = shape[1], shape[2], shape[3]
    else:
        h, w, c = shape[1], shape[2], shape[3]
    if pre.resize is not None:
        h, w = pre.resize
    if not isinstance(h, int) or not isinstance(w, int):
        raise InputError(f"{path}: input {inp.name!r} has dynamic spatial dims; give --resize H,W")
    try:
        with _open_image(path, max_pixels) as im:
            im.load()
            mode = "L" if pre.channels == "GRAY" else "RGB"
            im = im.convert(mode).resize((w, h), Image.Resampling.BILINEAR)
            arr = np.asarray(im, dtype=np.float32)
    except InputError:
        raise
    except MemoryError:
        raise InputError(f"{path}: out of memory decoding the image") from None
    except Exception as exc:  # truncated or corrupt data: PIL raises OSError, ValueError, SyntaxError...
        raise InputError(f"{path}: not a readable image ({type(exc).__name__})") from None
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if pre.channels == "BGR":
        arr = arr[:, :, ::-1]
    if isinstance(c, int) and arr.shape[2] != c:
        raise InputError(f"{path}: image has {arr.shape[2]} channel(s) but input {inp.name!r} expects {c} "
                         "(see --channels)")
    arr = arr * pre.scale
    mean = np.asarray(pre.mean, np.float32)
    std = np.asarray(pre.std, np.float32)
    arr = (arr - mean) / std
    if pre.layout == "NCHW":
        arr = arr.transpose(2, 0, 1)
    return np.ascontiguousarray(arr[None], dtype=np.float32)


def load_image_folder(path: Path, graph: Graph, pre: ImagePreprocess, limits: CalibLimits) -> CalibrationSet:
    """Every .png/.jpg/.bmp in the folder (sorted by name) is one sample."""
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    inputs = list(graph.inputs)
    if len(inputs) != 1:
        raise InputError(f"{path}: a folder of images needs a single-input model (this one has {len(inputs)})")
    if len(files) > limits.max_samples:
        raise InputError(f"{path}: {len(files)} images is over the limit of {limits.max_samples}")
    inp = inputs[0]
    channels = 1 if pre.channels == "GRAY" else 3
    for option, values in (("--mean", pre.mean), ("--std", pre.std)):
        if len(values) not in (1, channels):
            raise InputError(f"{option}: {len(values)} values for {pre.channels} images; give 1 or {channels} "
                             "(one per channel)")
    for f in files:  # decode every file once up front: a corrupt image is named before work starts
        _check_sample(load_image(f, inp, pre), inp, str(f))
    from engine.quant.split import picture_key

    return CalibrationSet(str(path), len(files),
                          lambda i: {inp.name: _check_sample(load_image(files[i], inp, pre), inp, str(files[i]))},
                          [picture_key(f) for f in files])


def load_calibration(source: str | Path, graph: Graph, preprocess: ImagePreprocess | None = None,
                     limits: CalibLimits | None = None) -> CalibrationSet:
    """Open calibration data for a graph: an .npz, a folder of .npy files, or a folder of images."""
    path = Path(source)
    limits = limits or CalibLimits()
    if not path.exists():
        raise InputError(f"{path}: no such file or folder (--calib)")
    if not path.is_file() and not path.is_dir():
        raise InputError(f"{path}: not a regular file or folder (--calib)")
    if path.is_file():
        if path.suffix.lower() == ".npz":
            return load_npz(path, graph, limits)
        raise InputError(f"{path}: calibration data must be an .npz file or a folder of images or .npy files")
    try:
        entries = [p for p in path.iterdir() if p.is_file()]
    except OSError as exc:
        raise InputError(f"{path}: cannot list the folder: {exc.strerror} (--calib)") from None
    if any(p.suffix == ".npy" for p in entries):
        return load_npy_folder(path, graph, limits)
    if any(p.suffix.lower() in IMAGE_SUFFIXES for p in entries):
        return load_image_folder(path, graph, preprocess or ImagePreprocess(), limits)
    raise InputError(f"{path}: folder holds no usable sample (.npy, .png, .jpg, .bmp)")
