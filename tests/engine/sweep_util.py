"""Sweep fixtures: two real trained models with real data, and specs over them.

digits_cnn was trained on sklearn's digits (its held-out split is assets/data/digits_test.npz);
rapidocr's ch_ppocr_mobile_v2.0_cls_mobile is PaddleOCR's exported text-direction classifier,
stored with a -1 batch dimension that we fix to 1 at 3x48x192, calibrated on skimage photos.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import onnx
import yaml

from tests.models import ASSETS

CLS_MODEL = Path(sysconfig.get_paths()["purelib"]) / "rapidocr" / "models" / "ch_ppocr_mobile_v2.0_cls_mobile.onnx"
CLS_SHAPE = (1, 3, 48, 192)


def digits_data(folder: Path) -> tuple[Path, Path, Path]:
    """(model, calibration .npz, held-out eval .npz of 512 samples) of digits_cnn."""
    ev = folder / "digits_eval.npz"
    if not ev.exists():
        x = np.load(ASSETS / "data" / "digits_test.npz")["x"][:512, None].astype(np.float32)
        np.savez(ev, x=x)
    return ASSETS / "models" / "digits_cnn.onnx", ASSETS / "data" / "digits_calib.npz", ev


def cls_data(folder: Path, samples: int = 4) -> tuple[Path, Path]:
    """(model at a fixed shape, calibration .npz of real photos) of the PP-OCR direction classifier."""
    model, calib = folder / "ppocr_cls.onnx", folder / "ppocr_cls_calib.npz"
    if not model.exists():
        m = onnx.load(str(CLS_MODEL))
        for d, v in zip(m.graph.input[0].type.tensor_type.shape.dim, CLS_SHAPE):
            d.Clear()
            d.dim_value = v
        for o in m.graph.output:
            for d in o.type.tensor_type.shape.dim:
                if d.HasField("dim_value") and d.dim_value < 0:
                    d.Clear()
                    d.dim_value = 1
        del m.graph.value_info[:]
        onnx.save(m, str(model))
    if not calib.exists():
        from skimage import data, transform

        photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket(), data.cat(), data.hubble_deep_field()]
        x = np.stack([transform.resize(p, CLS_SHAPE[2:]).transpose(2, 0, 1)[None] for p in photos[:samples]])
        np.savez(calib, x=(x * 2 - 1).astype(np.float32))  # PaddleOCR's cls normalizes to [-1, 1]
    return model, calib


def write_spec(folder: Path, models: list[dict], targets: list, quant: list[dict], name: str = "spec.yaml",
               **extra) -> Path:
    """Write a SPEC.yaml and return its path."""
    p = folder / name
    p.write_text(yaml.safe_dump({"models": models, "targets": targets, "quant": quant, **extra}), encoding="utf-8")
    return p


def digits_entry(folder: Path, calib_samples: int = 64, eval_samples: int = 8) -> dict:
    """The spec entry of digits_cnn (errors measured on held-out samples)."""
    model, calib, ev = digits_data(folder)
    return {"path": str(model), "calib": str(calib), "calib_samples": calib_samples, "eval": str(ev),
            "eval_samples": eval_samples}


def cls_entry(folder: Path, samples: int = 4, eval_samples: int = 2) -> dict:
    """The spec entry of the PP-OCR classifier (the error measured on its calibration photos)."""
    model, calib = cls_data(folder, samples)
    return {"path": str(model), "calib": str(calib), "eval_samples": eval_samples}


def acceptance_spec(folder: Path, heavy: bool = False) -> Path:
    """2 real models x 1 target over 2 SRAM sizes x 2 methods: 8 points (digits' error on 32
    held-out samples, in 2 shards). ``heavy`` (the benchmark) measures each point's error on more
    samples: 512 held-out digits (in 8 shards), 6 photos."""
    models = ([digits_entry(folder, 128, 512), cls_entry(folder, 6, 6)] if heavy
              else [digits_entry(folder, eval_samples=32), cls_entry(folder)])
    return write_spec(folder, models, [{"name": "ethos-u55", "vary": {"npu.sram_kib": [48, 512]}}],
                      [{"method": "minmax"}, {"method": "percentile"}], shard_samples=64 if heavy else 16)
