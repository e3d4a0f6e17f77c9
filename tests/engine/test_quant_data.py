"""Calibration data loading: formats, preprocessing and clear errors for bad data."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from PIL import Image

import engine
from engine.errors import InputError
from engine.quant.data import ImagePreprocess, load_calibration


def _image_model(layout="NCHW", c=3, h=8, w=8):
    shape = [1, c, h, w] if layout == "NCHW" else [1, h, w, c]
    g = helper.make_graph([helper.make_node("Relu", ["image"], ["y"], name="relu")], "img",
                          [helper.make_tensor_value_info("image", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return engine.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _png(path, rgb):
    Image.fromarray(np.full((16, 12, 3), rgb, np.uint8)).save(path)


def test_npz_stack_yields_one_feed_per_sample(tmp_path):
    g = _image_model()
    np.savez(tmp_path / "c.npz", image=np.random.default_rng(0).random((5, 1, 3, 8, 8), np.float32))
    data = load_calibration(tmp_path / "c.npz", g)
    assert len(data) == 5
    assert [f["image"].shape for f in data] == [(1, 3, 8, 8)] * 5


def test_npz_of_wrong_shape_names_file_and_input(tmp_path):
    g = _image_model()
    np.savez(tmp_path / "bad.npz", image=np.zeros((4, 1, 3, 9, 8), np.float32))
    with pytest.raises(InputError, match=r"bad\.npz.*does not fit input 'image'.*dimension 2"):
        load_calibration(tmp_path / "bad.npz", g)


def test_npz_without_sample_axis_explains_the_expected_layout(tmp_path):
    g = _image_model()
    np.savez(tmp_path / "flat.npz", image=np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(InputError, match=r"stack samples on a new leading axis"):
        load_calibration(tmp_path / "flat.npz", g)


def test_npz_with_nan_names_the_sample(tmp_path):
    g = _image_model()
    x = np.zeros((3, 1, 3, 8, 8), np.float32)
    x[2, 0, 1, 2, 3] = np.nan
    np.savez(tmp_path / "nan.npz", image=x)
    with pytest.raises(InputError, match=r"nan\.npz: key 'image' sample 2 holds NaN"):
        load_calibration(tmp_path / "nan.npz", g)


def test_npz_of_strings_is_refused(tmp_path):
    g = _image_model()
    np.savez(tmp_path / "s.npz", image=np.array([["a"]] * 2))
    with pytest.raises(InputError, match="not numeric"):
        load_calibration(tmp_path / "s.npz", g)


def test_npz_with_unknown_key_is_refused(tmp_path):
    g = _image_model()
    np.savez(tmp_path / "k.npz", image=np.zeros((1, 1, 3, 8, 8), np.float32), other=np.zeros((1, 2)))
    with pytest.raises(InputError, match="key 'other' is not a model input"):
        load_calibration(tmp_path / "k.npz", g)


def test_image_folder_is_resized_scaled_and_laid_out(tmp_path):
    _png(tmp_path / "a.png", (255, 0, 51))
    _png(tmp_path / "b.png", (0, 255, 0))
    g = _image_model()
    data = load_calibration(tmp_path, g)
    x = data.sample(0)["image"]
    assert x.shape == (1, 3, 8, 8)
    np.testing.assert_allclose(x[0, :, 0, 0], [1.0, 0.0, 0.2], atol=1e-6)
    bgr = load_calibration(tmp_path, g, ImagePreprocess(channels="BGR", mean=(0.5,), std=(0.5,)))
    np.testing.assert_allclose(bgr.sample(0)["image"][0, :, 0, 0], [-0.6, -1.0, 1.0], atol=1e-6)


def test_image_folder_nhwc_layout(tmp_path):
    _png(tmp_path / "a.png", (255, 0, 0))
    data = load_calibration(tmp_path, _image_model("NHWC"), ImagePreprocess(layout="NHWC"))
    x = data.sample(0)["image"]
    assert x.shape == (1, 8, 8, 3)
    np.testing.assert_allclose(x[0, 0, 0], [1.0, 0.0, 0.0])


def test_corrupt_image_is_named(tmp_path):
    _png(tmp_path / "good.png", (1, 2, 3))
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    with pytest.raises(InputError, match=r"broken\.jpg: not a readable image"):
        load_calibration(tmp_path, _image_model())


def test_empty_folder_is_an_error_not_random_data(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(InputError, match="holds no usable sample"):
        load_calibration(tmp_path, _image_model())


def test_npy_folder_adds_the_batch_dim(tmp_path):
    for i in range(3):
        np.save(tmp_path / f"s{i}.npy", np.full((3, 8, 8), i, np.float32))
    data = load_calibration(tmp_path, _image_model())
    assert len(data) == 3
    assert data.sample(2)["image"].shape == (1, 3, 8, 8)
    assert data.sample(2)["image"].max() == 2.0


def test_missing_path_is_an_error(tmp_path):
    with pytest.raises(InputError, match="no such file or folder"):
        load_calibration(tmp_path / "nope.npz", _image_model())


