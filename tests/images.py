"""Real pictures for evaluating image models on data they were not calibrated on.

``heldout_crops`` cuts random square crops (a fixed seed, so every run sees the same ones) out of
the scikit-image pictures that assets/data/images was cropped from (bundled with scikit-image;
nothing is downloaded), resizes them and returns them as float32 NCHW batches, normalized like
the model expects. The bundled 12 images are what calibration sees; these are the held-out set.
"""

from __future__ import annotations

import numpy as np

PICTURES = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry",
            "retina", "colorwheel", "stereo_motorcycle", "coins")
"""The 10 scikit-image pictures mobilenet_demo was trained to tell apart (assets/make_models.py)."""


def _pictures() -> list[np.ndarray]:
    import skimage.data as data

    out = []
    for name in PICTURES:
        im = getattr(data, name)()
        im = im[0] if isinstance(im, tuple) else im
        if im.ndim == 2:
            im = np.repeat(im[:, :, None], 3, axis=2)
        out.append(np.ascontiguousarray(im[:, :, :3]))
    return out


def heldout_crops(n: int, height: int, width: int, mean: float = 0.0, std: float = 1.0,
                  seed: int = 0) -> np.ndarray:
    """``n`` crops as (n, 1, 3, height, width) float32 ((pixel / 255 - mean) / std), one sample
    per leading index in the --calib npz layout."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    pics = _pictures()
    out = np.empty((n, 1, 3, height, width), np.float32)
    for k in range(n):
        im = pics[int(rng.integers(len(pics)))]
        h, w, _ = im.shape
        side = int(min(h, w) * rng.uniform(0.25, 0.9))
        aspect = width / height  # crops of the model's aspect ratio
        ch, cw = (side, min(w, int(side * aspect))) if aspect >= 1 else (min(h, int(side / aspect)), side)
        y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        crop = Image.fromarray(im[y:y + ch, x:x + cw]).resize((width, height), Image.BILINEAR)
        a = np.asarray(crop, np.float32) / 255.0
        if rng.random() < 0.5:
            a = a[:, ::-1]
        out[k, 0] = ((a - mean) / std).transpose(2, 0, 1)
    return out
