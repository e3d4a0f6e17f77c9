"""The mixed-precision search's check samples (the figure it reports) are spread over the pictures
of an ordered calibration set, not taken from a few of them (engine/quant/split.py)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from engine.quant.search import held_out_split, split_samples
from engine.quant.split import picture_key
from tests.engine.cli_util import run_cli

PICTURES = ("astronaut", "coffee", "chelsea", "rocket", "camera")


def _conv_model(path) -> None:
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def _crop_folder(folder) -> None:
    """Four crops of each of five scikit-image pictures, named crop first (0_astronaut.png,
    0_camera.png, ..., 3_rocket.png), so the folder's name order takes the pictures in turn."""
    from skimage import data

    folder.mkdir()
    for name in PICTURES:
        im = getattr(data, name)()
        im = np.repeat(im[..., None], 3, axis=2) if im.ndim == 2 else im[..., :3]
        for k in range(4):
            y, x = 40 * k, 60 * k
            Image.fromarray(np.ascontiguousarray(im[y:y + 64, x:x + 64])).save(folder / f"{k}_{name}.png")


def test_the_check_samples_cover_every_picture_of_a_5_picture_folder(tmp_path):
    """quantize --target-sqnr on a folder of 20 crops of 5 pictures: the 5 check samples the
    report names are one crop of each picture (evenly spaced indices took 3 of the 5)."""
    _conv_model(tmp_path / "m.onnx")
    _crop_folder(tmp_path / "crops")
    report = tmp_path / "r.json"
    rc, _, err = run_cli(["quantize", str(tmp_path / "m.onnx"), "--calib", str(tmp_path / "crops"), "-o",
                          str(tmp_path / "q.onnx"), "--quiet", "--no-optimize", "--target-sqnr", "60",
                          "--raise-to", "int16", "--time-budget", "20", "--report", str(report)])
    assert rc == 0, err
    mp = json.loads(report.read_text())["mixed_precision"]
    assert mp["samples"]["verify"] == len(mp["check_samples"]) == 5
    assert sorted(mp["check_pictures"]) == sorted(PICTURES), mp["check_pictures"]


def test_a_folder_names_its_pictures_without_their_numbers():
    assert picture_key("00_astronaut.png") == picture_key("10_astronaut.png") == picture_key("astronaut-3.jpg")
    assert picture_key("02_cat.png") != picture_key("01_coffee.png")


@pytest.mark.parametrize(("n", "pictures", "order"), [(16, 5, "in turn"), (32, 2, "in turn"), (24, 3, "in turn"),
                                                       (16, 5, "one after another"), (40, 8, "one after another")])
def test_check_samples_of_an_unnamed_ordered_set_cover_as_many_pictures_as_they_can(n, pictures, order):
    """An .npz of crops (no names): PP-OCRv6 det's bench takes 5 photographs in turn and gave
    check samples of 2 of them; each check sample now shows another picture while there are any."""
    picture = (lambda i: i % pictures) if order == "in turn" else (lambda i: i * pictures // n)
    rest, check = held_out_split(n)
    assert len({picture(i) for i in check}) == min(len(check), pictures), check
    assert sorted(rest + check) == list(range(n))
    search, check2 = split_samples(n, search=4)
    assert check2 == check and not set(search) & set(check)
