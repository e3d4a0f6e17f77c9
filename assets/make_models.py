"""Build NPU Studio's bundled demo models and data (assets/models/, assets/data/).

Run once, from anywhere, with a separate PyTorch venv (PyTorch is never a project dependency;
the files it writes are committed):

    python3 -m venv /work/torchvenv
    /work/torchvenv/bin/pip install torch==2.13.0 onnxscript onnx onnxruntime numpy \
        scikit-learn scikit-image
    /work/torchvenv/bin/python assets/make_models.py

Needs torch==2.13.0 (CPU build), onnxscript, onnx, onnxruntime, numpy, scikit-learn and
scikit-image; no network (all data comes from scikit-learn's and scikit-image's bundled files).
Seeds are fixed and torch runs single-threaded in deterministic mode, so re-running on the same
machine and package versions writes byte-identical files (.npz files carry fixed zip timestamps).

What it writes:

models/mobilenet_demo.onnx  (opset 17)
    MobileNetV3-style classifier. Input "image" float32 [1,3,96,96]: RGB, NCHW, values 0..1.
    The ImageNet mean/std normalization is INSIDE the model (a Sub and a Div at the start), so
    images are fed as plain 0..1 pixels (the CLI's default image-folder preprocessing).
    Output "logits" [1,10]. Trained for a few hundred steps to tell which of 10 scikit-image
    pictures a random crop comes from (class names in the model's metadata "classes").
    Holds depthwise-separable convs (grouped Conv, group == channels), BatchNormalization nodes
    with real running statistics, HardSwish, ReLU, ReLU6 (Clip) and squeeze-excite blocks
    (GlobalAveragePool -> Conv -> Relu -> Conv -> HardSigmoid -> Mul).
models/transformer_demo.onnx  (opset 14)
    Pre-norm transformer encoder: 2 layers, d_model 64, 4 heads, FFN 128, sequence 32.
    Input "x" float32 [1,32,64] (already embedded tokens), output "logits" [1,4] after mean
    pooling. Exported by the TorchScript exporter at opset 14, which writes LayerNorm decomposed
    (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add) and GELU in erf form
    (Div sqrt2/Erf/Add 1/Mul/Mul 0.5). Trained on a small synthetic task (see transformer_task).
models/digits_cnn.onnx  (opset 13)
    CNN trained on scikit-learn's 8x8 digits. Input "x" float32 [1,1,8,8] = pixel/16,
    output "logits" [1,10]. Conv+BN+Relu, Conv+BN+Relu, MaxPool, Flatten, Gemm.
data/digits_test.npz        "x" (N,1,8,8) float32, "y" (N,) int64: the held-out 30% split.
data/digits_calib.npz       "x" (200,1,1,8,8): 200 training samples, the CLI's --calib format.
data/images/*.png           12 RGB 96x96 crops of scikit-image pictures (image-folder calibration).
data/mobilenet_calib.npz    "image" (32,1,3,96,96) float32 0..1: those 12 images + 20 augmented.
data/transformer_calib.npz  "x" (16,1,32,64) float32: samples of the transformer's task.

BatchNormalization survives export as its own op because the models are exported with
training=torch.onnx.TrainingMode.PRESERVE while in eval mode: the exporter then skips the
eval-mode Conv+BN fusion, and the BN nodes carry training_mode=0 (opsets >= 14) and the
running statistics (the project's optimizer is what folds them).
"""

from __future__ import annotations

import collections
import hashlib
import io
import math
import warnings
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F
from PIL import Image
from skimage import data as skdata
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"
DATA = HERE / "data"
IMAGES = DATA / "images"

IMG = 96
CLASSES = ["astronaut", "coffee", "cat", "rocket", "galaxies", "ihc", "retina", "colorwheel",
           "motorcycle", "coins"]
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def require(ok: bool, message: str) -> None:
    """A check that python -O does not skip."""
    if not ok:
        raise SystemExit(f"make_models.py: {message}")


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)


# --------------------------------------------------------------------------- files


def save_npz(path: Path, arrays: dict[str, np.ndarray], compress: bool = True) -> None:
    """np.savez with fixed zip timestamps, so the same arrays give the same bytes."""
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=method) as zf:
        for key, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def op_histogram(model: onnx.ModelProto) -> dict[str, int]:
    return dict(sorted(collections.Counter(n.op_type for n in model.graph.node).items()))


def export(model: nn.Module, example: torch.Tensor, path: Path, input_name: str, opset: int,
           doc: str, metadata: dict[str, str]) -> onnx.ModelProto:
    """TorchScript export (dynamo=False) with BN kept as BatchNormalization; static shapes."""
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (example,), str(path), dynamo=False, opset_version=opset,
            input_names=[input_name], output_names=["logits"], do_constant_folding=True,
            training=torch.onnx.TrainingMode.PRESERVE,
        )
    proto = onnx.load(str(path))
    proto.doc_string = doc
    for k, v in metadata.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = k, v
    onnx.save(proto, str(path))
    return proto


def verify(path: Path, model: nn.Module, samples: np.ndarray, input_name: str,
           required: dict[str, int], forbidden: tuple[str, ...] = ()) -> dict[str, int]:
    """full_check, static I/O, op coverage, and onnxruntime == torch on real samples."""
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    require([i.name for i in proto.graph.input] == [input_name], f"{path.name}: input names")
    require([o.name for o in proto.graph.output] == ["logits"], f"{path.name}: output names")
    for vi in (*proto.graph.input, *proto.graph.output):
        dims = vi.type.tensor_type.shape.dim
        static = bool(dims) and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims)
        require(static, f"{path.name}: {vi.name} has no static shape")
    hist = op_histogram(proto)
    for op, least in required.items():
        require(hist.get(op, 0) >= least, f"{path.name}: want >= {least} {op}, have {hist}")
    for op in forbidden:
        require(op not in hist, f"{path.name}: {op} must not appear ({hist})")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    worst = 0.0
    model.eval()
    with torch.no_grad():
        for s in samples:
            ref = model(torch.from_numpy(s)).numpy()
            got = sess.run(None, {input_name: s})[0]
            require(got.shape == ref.shape, f"{path.name}: output shape {got.shape} != {ref.shape}")
            require(bool(np.isfinite(got).all()), f"{path.name}: non-finite output")
            worst = max(worst, float(np.abs(got - ref).max() / max(1.0, np.abs(ref).max())))
    require(worst < 1e-4, f"{path.name}: onnxruntime differs from torch by {worst:.2e} (relative)")
    print(f"  {path.name}: check_model(full_check) ok, onnxruntime vs torch max rel diff "
          f"{worst:.2e} over {len(samples)} samples, {len(proto.graph.node)} nodes")
    print(f"  ops: {hist}")
    return hist


# --------------------------------------------------------------------------- images


def source_images() -> list[torch.Tensor]:
    """The 10 class pictures as float tensors (3,H,W) in 0..1 (grey ones repeated to RGB)."""
    raw = [skdata.astronaut(), skdata.coffee(), skdata.chelsea(), skdata.rocket(),
           skdata.hubble_deep_field(), skdata.immunohistochemistry(), skdata.retina(),
           skdata.colorwheel(), skdata.stereo_motorcycle()[0], skdata.coins()]
    out = []
    for im in raw:
        if im.ndim == 2:
            im = np.repeat(im[:, :, None], 3, axis=2)
        out.append(torch.from_numpy(np.ascontiguousarray(im[:, :, :3])).permute(2, 0, 1).float() / 255)
    return out


def random_crop(img: torch.Tensor, gen: torch.Generator, lo: float = 0.25, hi: float = 0.9,
                jitter: bool = True) -> torch.Tensor:
    """A square crop of a random size and place, resized to IMG x IMG; maybe flipped/jittered."""
    _, h, w = img.shape
    u = torch.rand(6, generator=gen).tolist()
    side = int(min(h, w) * (lo + (hi - lo) * u[0]))
    y = int((h - side) * u[1])
    x = int((w - side) * u[2])
    crop = img[:, y:y + side, x:x + side][None]
    crop = F.interpolate(crop, size=(IMG, IMG), mode="bilinear", antialias=True, align_corners=False)[0]
    if jitter:
        if u[3] < 0.5:
            crop = crop.flip(-1)
        crop = crop * (0.8 + 0.4 * u[4]) + (u[5] - 0.5) * 0.1
    return crop.clamp(0, 1)


def crop_batch(images: list[torch.Tensor], n: int, gen: torch.Generator,
               jitter: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(0, len(images), (n,), generator=gen)
    x = torch.stack([random_crop(images[int(c)], gen, jitter=jitter) for c in labels])
    return x, labels


def make_images(images: list[torch.Tensor]) -> np.ndarray:
    """12 PNG crops (one per class, two more of astronaut and cat) -> uint8 (12,96,96,3)."""
    IMAGES.mkdir(parents=True, exist_ok=True)
    for old in IMAGES.glob("*.png"):
        old.unlink()
    gen = torch.Generator().manual_seed(7)
    picks = [*range(len(CLASSES)), 0, 2]
    out = []
    for i, c in enumerate(picks):
        crop = random_crop(images[c], gen, lo=0.45, hi=0.85, jitter=False)
        arr = (crop.permute(1, 2, 0).numpy() * 255 + 0.5).astype(np.uint8)
        Image.fromarray(arr, "RGB").save(IMAGES / f"{i:02d}_{CLASSES[c]}.png", format="PNG")
        out.append(arr)
    return np.stack(out)


def make_mobilenet_calib(pngs: np.ndarray) -> np.ndarray:
    """The 12 PNGs as 0..1 NCHW, then 20 augmented ones (flip, zoom, brightness) on the uint8 grid."""
    rng = np.random.default_rng(11)
    base = [torch.from_numpy(p).permute(2, 0, 1).float() / 255 for p in pngs]
    samples = list(base)
    while len(samples) < 32:
        img = base[int(rng.integers(len(base)))]
        side = int(rng.integers(64, IMG + 1))
        y, x = (int(v) for v in rng.integers(0, IMG - side + 1, size=2))
        aug = F.interpolate(img[None, :, y:y + side, x:x + side], size=(IMG, IMG), mode="bilinear",
                            antialias=True, align_corners=False)[0]
        if rng.random() < 0.5:
            aug = aug.flip(-1)
        aug = aug * float(rng.uniform(0.75, 1.25))
        samples.append(aug.clamp(0, 1))
    x = torch.stack(samples).numpy()
    x = np.round(x * 255) / 255  # stay on the 8-bit grid, as decoded images are
    return x.astype(np.float32)[:, None]


# --------------------------------------------------------------------------- MobileNet


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
            act: type[nn.Module] | None = None) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, squeeze: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.relu = nn.ReLU()
        self.fc2 = nn.Conv2d(squeeze, c, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.fc2(self.relu(self.fc1(self.pool(x)))))


class InvertedResidual(nn.Module):
    """MobileNetV3 block: [1x1 expand] -> depthwise kxk -> [SE] -> 1x1 project (+ skip)."""

    def __init__(self, cin: int, exp: int, cout: int, k: int, stride: int, se: bool,
                 act: type[nn.Module]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        if exp != cin:
            layers.append(conv_bn(cin, exp, 1, act=act))
        layers.append(conv_bn(exp, exp, k, stride, groups=exp, act=act))
        if se:
            layers.append(SqueezeExcite(exp, max(8, exp // 4)))
        layers.append(conv_bn(exp, cout, 1))
        self.block = nn.Sequential(*layers)
        self.skip = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.skip else y


class MobileNetDemo(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(MEAN).reshape(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(STD).reshape(1, 3, 1, 1))
        hs, relu, relu6 = nn.Hardswish, nn.ReLU, nn.ReLU6
        self.features = nn.Sequential(
            conv_bn(3, 16, 3, 2, act=hs),                          # 48x48
            InvertedResidual(16, 16, 16, 3, 2, True, relu),        # 24x24, depthwise-separable
            InvertedResidual(16, 64, 24, 3, 2, False, relu6),      # 12x12
            InvertedResidual(24, 72, 24, 3, 1, False, relu6),      # residual
            InvertedResidual(24, 96, 40, 5, 2, True, hs),          # 6x6
            InvertedResidual(40, 120, 40, 5, 1, True, hs),         # residual
            InvertedResidual(40, 120, 48, 5, 1, True, hs),
            conv_bn(48, 288, 1, act=hs),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(288, 128), nn.Hardswish(),
                                        nn.Dropout(0.2), nn.Linear(128, classes))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = (image - self.mean) / self.std
        return self.classifier(self.pool(self.features(x)))


def make_mobilenet(images: list[torch.Tensor], calib: np.ndarray) -> float:
    print("mobilenet_demo: training to tell which of 10 pictures a crop comes from")
    seed_everything(0)
    net = MobileNetDemo(len(CLASSES))
    gen = torch.Generator().manual_seed(1)
    steps = 300
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps)
    net.train()
    for step in range(steps):
        x, y = crop_batch(images, 32, gen)
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 99:
            print(f"  step {step + 1}: loss {loss.item():.3f}")
    # Re-estimate BN statistics in train mode over real crops (cumulative average), then eval.
    bns = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    with torch.no_grad():
        for _ in range(16):
            net(crop_batch(images, 32, gen, jitter=False)[0])
    shifted = 0
    for bn in bns:
        bn.momentum = 0.1
        require(bool((bn.running_var - 1).abs().max() > 1e-2), "BN variance left at its initial 1")
        shifted += int(bn.running_mean.abs().max() > 1e-2)
    print(f"  BN statistics re-estimated on real crops: {len(bns)} layers, {shifted} with a "
          f"non-zero mean, running_var in [{min(float(b.running_var.min()) for b in bns):.3g}, "
          f"{max(float(b.running_var.max()) for b in bns):.3g}]")
    require(shifted >= len(bns) // 2, "most BN means stayed at 0")
    net.eval()
    test_gen = torch.Generator().manual_seed(12345)
    with torch.no_grad():
        x, y = crop_batch(images, 300, test_gen, jitter=False)
        acc = float((net(x).argmax(1) == y).float().mean())
    print(f"  accuracy on 300 fresh crops: {acc:.3f}")
    require(acc >= 0.9, f"accuracy {acc:.3f} < 0.9")
    path = MODELS / "mobilenet_demo.onnx"
    export(net, torch.from_numpy(calib[0]), path, "image", 17,
           "MobileNetV3-style demo classifier (NPU Studio). Input: RGB NCHW float 0..1, "
           "normalization inside the model. Output: logits over 10 source pictures.",
           {"classes": ",".join(CLASSES), "preprocess": "RGB NCHW 0..1 (mean/std inside the model)"})
    verify(path, net, calib, "image",
           {"Conv": 27, "BatchNormalization": 19, "HardSwish": 9, "HardSigmoid": 4,
            "GlobalAveragePool": 5, "Clip": 4, "Relu": 5, "Mul": 4, "Gemm": 2})
    proto = onnx.load(str(path))
    dw = [n for n in proto.graph.node if n.op_type == "Conv"
          and next(a.i for a in n.attribute if a.name == "group") > 1]
    print(f"  depthwise convs (group == channels): {len(dw)}")
    require(len(dw) == 6, f"want 6 depthwise convs, have {len(dw)}")
    return acc


# --------------------------------------------------------------------------- transformer


class SelfAttention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        dh = d // self.heads
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(b, t, self.heads, dh).transpose(1, 2)
        k = k.reshape(b, t, self.heads, dh).transpose(1, 2)
        v = v.reshape(b, t, self.heads, dh).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.out(y)


class EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = SelfAttention(d, heads)
        self.norm2 = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, ffn), nn.GELU(), nn.Linear(ffn, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class TransformerDemo(nn.Module):
    def __init__(self, d: int = 64, heads: int = 4, ffn: int = 128, layers: int = 2,
                 seq: int = 32, classes: int = 4) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        self.layers = nn.ModuleList(EncoderLayer(d, heads, ffn) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x).mean(dim=1))


def transformer_task(n: int, gen: torch.Generator, protos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Noise tokens; 6 of the 32 carry the class's prototype, 2 carry a random other class's.

    The label is the prototype that occurs more often, so the model has to count, not just spot.
    """
    x = torch.randn(n, 32, 64, generator=gen) * 0.7
    y = torch.randint(0, 4, (n,), generator=gen)
    other = (y + torch.randint(1, 4, (n,), generator=gen)) % 4
    for i in range(n):
        pos = torch.randperm(32, generator=gen)
        x[i, pos[:6]] += protos[y[i]]
        x[i, pos[6:8]] += protos[other[i]]
    return x, y


def make_transformer() -> tuple[float, np.ndarray]:
    print("transformer_demo: training on the synthetic counting task")
    seed_everything(0)
    gen = torch.Generator().manual_seed(2)
    protos = F.normalize(torch.randn(4, 64, generator=gen), dim=-1) * 2.0
    net = TransformerDemo()
    steps = 600
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3, weight_decay=1e-2)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps)
    net.train()
    for step in range(steps):
        x, y = transformer_task(64, gen, protos)
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 200 == 199:
            print(f"  step {step + 1}: loss {loss.item():.3f}")
    net.eval()
    test_gen = torch.Generator().manual_seed(54321)
    with torch.no_grad():
        x, y = transformer_task(512, test_gen, protos)
        acc = float((net(x).argmax(1) == y).float().mean())
    print(f"  accuracy on 512 fresh samples: {acc:.3f}")
    require(acc >= 0.9, f"accuracy {acc:.3f} < 0.9")
    calib = x[:16].numpy()[:, None].astype(np.float32)
    path = MODELS / "transformer_demo.onnx"
    export(net, torch.from_numpy(calib[0]), path, "x", 14,
           "Transformer encoder demo (NPU Studio): 2 pre-norm layers, d_model 64, 4 heads, FFN 128, "
           "sequence 32; input pre-embedded tokens, output logits over 4 classes after mean pooling.",
           {"classes": "0,1,2,3"})
    verify(path, net, calib, "x",
           {"ReduceMean": 11, "Pow": 5, "Sqrt": 5, "Erf": 2, "Softmax": 2, "MatMul": 12,
            "Transpose": 8, "Reshape": 8},
           forbidden=("LayerNormalization", "Gelu"))
    return acc, calib


# --------------------------------------------------------------------------- digits


class DigitsCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def make_digits() -> float:
    print("digits_cnn: training on scikit-learn's 8x8 digits (70/30 stratified split, seed 0)")
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.3, stratify=y, random_state=0)
    save_npz(DATA / "digits_test.npz", {"x": x_te, "y": y_te})
    save_npz(DATA / "digits_calib.npz", {"x": x_tr[:200][:, None]})
    seed_everything(0)
    net = DigitsCNN()
    gen = torch.Generator().manual_seed(3)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    xt, yt = torch.from_numpy(x_tr), torch.from_numpy(y_tr)
    epochs = 30
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
    for _ in range(epochs):
        net.train()
        order = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), 32):
            idx = order[i:i + 32]
            loss = F.cross_entropy(net(xt[idx]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
    net.eval()
    with torch.no_grad():
        pred = net(torch.from_numpy(x_te)).argmax(1).numpy()
    acc = float((pred == y_te).mean())
    print(f"  held-out FP32 accuracy (torch): {acc:.4f} on {len(y_te)} digits")
    require(acc >= 0.95, f"digits accuracy {acc:.4f} < 0.95")
    path = MODELS / "digits_cnn.onnx"
    export(net, torch.from_numpy(x_te[0:1]), path, "x", 13,
           "CNN trained on scikit-learn's 8x8 digits (NPU Studio demo). Input: pixel/16 in 0..1, "
           "shape [1,1,8,8]. Output: logits over digits 0-9.",
           {"classes": ",".join(str(i) for i in range(10)), "preprocess": "pixel / 16",
            "heldout_accuracy": f"{acc:.4f}"})
    verify(path, net, x_te[:64, None], "x",
           {"Conv": 2, "BatchNormalization": 2, "Relu": 2, "MaxPool": 1, "Flatten": 1, "Gemm": 1})
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ort_pred = np.array([sess.run(None, {"x": s[None]})[0].argmax() for s in x_te])
    ort_acc = float((ort_pred == y_te).mean())
    print(f"  held-out FP32 accuracy (onnxruntime): {ort_acc:.4f}")
    require(ort_acc == acc, "onnxruntime and torch disagree on digits accuracy")
    return acc


# --------------------------------------------------------------------------- main


def main() -> None:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    MODELS.mkdir(parents=True, exist_ok=True)
    DATA.mkdir(parents=True, exist_ok=True)

    digits_acc = make_digits()
    _, tcalib = make_transformer()
    save_npz(DATA / "transformer_calib.npz", {"x": tcalib})
    images = source_images()
    pngs = make_images(images)
    calib = make_mobilenet_calib(pngs)
    save_npz(DATA / "mobilenet_calib.npz", {"image": calib})
    make_mobilenet(images, calib)

    print(f"\ndigits held-out FP32 accuracy: {digits_acc:.4f}")
    print("files:")
    total = 0
    for f in sorted([*MODELS.glob("*.onnx"), *DATA.glob("*.npz"), *IMAGES.glob("*.png")]):
        size = f.stat().st_size
        total += size
        digest = hashlib.sha256(f.read_bytes()).hexdigest()[:12]
        print(f"  {f.relative_to(HERE)}  {size / 1024:8.1f} KiB  sha256 {digest}")
    print(f"  total {total / 1024 / 1024:.2f} MiB")


if __name__ == "__main__":
    main()
