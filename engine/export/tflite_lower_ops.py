"""Data-movement and less common ops of the TFLite lowering (a mixin of tflite_lower._Lowering).

TRANSPOSE (the ONNX permutation rewritten for NHWC storage), PAD (constant zero: TFLite pads
with the output zero point, the real 0), STRIDED_SLICE, SPLIT, RESIZE_NEAREST_NEIGHBOR,
a spatial ReduceMean as AVERAGE_POOL_2D, and PRELU (its slopes stored as int8).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.errors import InputError
from engine.export.tflite_ir import TTensor
from engine.ir.graph import Node
from engine.quant.tflite_spec import const_operand_params

NHWC = (0, 2, 3, 1)
INV_NHWC = (0, 3, 1, 2)


def _const(node: Node, i: int) -> np.ndarray | None:
    v = node.input(i)
    return None if v is None or v.const is None else np.asarray(v.const)


def nhwc_perm(perm: list[int]) -> list[int]:
    """The permutation of NHWC-stored data equal to ONNX ``perm`` on NCHW data."""
    return [INV_NHWC[perm[NHWC[i]]] for i in range(4)]


def nhwc_axis(axis: int, rank: int) -> int:
    """An ONNX axis of a rank-``rank`` tensor in TFLite storage order."""
    axis %= rank
    return NHWC.index(axis) if rank == 4 else axis


class LoweringOps:
    """Ops added to the lowering; ``self`` is a tflite_lower._Lowering."""

    m: Any

    def nhwc4(self, rank: int) -> bool:
        """True when a tensor of this rank is stored NHWC (4-D feature maps of a spatial graph)."""
        return rank == 4 and bool(self.m.nhwc)

    def _move(self, node: Node) -> tuple[int, int]:
        x = self.value(node.inputs[0], node)  # type: ignore[attr-defined]
        y, _ = self.out_tensor(node, like=x)  # type: ignore[attr-defined]
        return x, self._same_params(node, x, y)  # type: ignore[attr-defined]

    def op_transpose(self, node: Node) -> None:
        x, y = self._move(node)
        rank = len(self.m.tensors[x].shape)
        perm = list(node.attrs.get("perm", list(range(rank))[::-1]))
        if self.nhwc4(rank):
            perm = nhwc_perm(perm)
        self.m.op("TRANSPOSE", [x, self.m.const(f"{node.name}_perm", np.asarray(perm, np.int32))], [y], node.name)

    def op_pad(self, node: Node) -> None:
        mode = node.attrs.get("mode", "constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        pads = _const(node, 1)
        value = _const(node, 2)
        if mode != "constant" or pads is None or (value is not None and float(np.ravel(value)[0]) != 0.0) \
                or node.input(3) is not None:
            raise InputError(f"TFLite export: Pad {node.name!r} must pad constant zeros with constant pads")
        x, y = self._move(node)
        rank = len(self.m.tensors[x].shape)
        pairs = np.stack([pads[:rank], pads[rank:]], axis=1).astype(np.int32)
        if self.nhwc4(rank):
            pairs = pairs[list(NHWC)]
        if np.any(pairs < 0):
            raise InputError(f"TFLite export: Pad {node.name!r} has negative pads")
        self.m.op("PAD", [x, self.m.const(f"{node.name}_pads", np.ascontiguousarray(pairs))], [y], node.name)

    def op_slice(self, node: Node) -> None:
        starts, ends = _const(node, 1), _const(node, 2)
        axes, steps = _const(node, 3), _const(node, 4)
        if starts is None or ends is None or (node.input(3) is not None and axes is None) \
                or (node.input(4) is not None and steps is None):
            raise InputError(f"TFLite export: Slice {node.name!r} needs constant starts/ends/axes/steps")
        x, y = self._move(node)
        shape = list(node.inputs[0].type.shape)  # type: ignore[union-attr]
        rank = len(shape)
        begin, end, stride = [0] * rank, list(shape), [1] * rank
        axes_l = list(range(len(starts))) if axes is None else [int(a) % rank for a in axes]
        steps_l = [1] * len(axes_l) if steps is None else [int(s) for s in steps]
        for a, s0, e0, st in zip(axes_l, starts, ends, steps_l):
            if st <= 0:
                raise InputError(f"TFLite export: Slice {node.name!r} with a non-positive step")
            d = shape[a]
            b0, f0 = int(s0), int(e0)
            b0 = min(max(b0 + d if b0 < 0 else b0, 0), d)
            f0 = min(max(f0 + d if f0 < 0 else f0, 0), d)
            begin[a], end[a], stride[a] = b0, f0, st
        if self.nhwc4(rank):
            begin, end, stride = ([v[i] for i in NHWC] for v in (begin, end, stride))
        if all(s_ == 1 for s_ in stride):  # unit steps: SLICE (begin, size)
            size = [e - b_ for b_, e in zip(begin, end)]
            ins = [x] + [self.m.const(f"{node.name}_{k}", np.asarray(v, np.int32))
                         for k, v in (("begin", begin), ("size", size))]
            self.m.op("SLICE", ins, [y], node.name)
            return
        ins = [x] + [self.m.const(f"{node.name}_{k}", np.asarray(v, np.int32))
                     for k, v in (("begin", begin), ("end", end), ("strides", stride))]
        self.m.op("STRIDED_SLICE", ins, [y], node.name)

    def op_split(self, node: Node) -> None:
        x = self.value(node.inputs[0], node)  # type: ignore[attr-defined]
        rank = len(self.m.tensors[x].shape)
        axis = int(node.attrs.get("axis", 0)) % rank
        axis = nhwc_axis(axis, rank) if self.nhwc4(rank) else axis
        outs = []
        src = self.m.tensors[x]
        for k, o in enumerate(node.outputs):
            if o is None:
                raise InputError(f"TFLite export: Split {node.name!r} output {k} is unused")
            qs = [c for c in o.consumers() if c.op_type == "QuantizeLinear"]
            if qs:
                t = self.q_tensor(qs[0], o.type.shape)  # type: ignore[attr-defined]
                self.tensor[qs[0].outputs[0].name] = t  # type: ignore[attr-defined]
                self.done_q.add(qs[0].name)  # type: ignore[attr-defined]
            else:
                t = self.m.add(TTensor(o.name, self.tfl_shape(o.type.shape), "int8",  # type: ignore[attr-defined]
                                       src.scale, src.zero_point))
            self.tensor[o.name] = t  # type: ignore[attr-defined]
            outs.append(self._same_params(node, x, t))  # type: ignore[attr-defined]
        sizes = [self.m.tensors[t].shape[axis] for t in outs]
        ax = self.m.const(f"{node.name}_axis", np.asarray(axis, np.int32).reshape(()))
        if len(set(sizes)) == 1:
            self.m.op("SPLIT", [ax, x], outs, node.name, num_splits=len(outs))
        else:
            sz = self.m.const(f"{node.name}_sizes", np.asarray(sizes, np.int32))
            self.m.op("SPLIT_V", [x, sz, ax], outs, node.name, num_splits=len(outs))

    def op_resize(self, node: Node) -> None:
        def attr(k: str, default: str) -> str:
            v = node.attrs.get(k, default)
            return v.decode() if isinstance(v, bytes) else str(v)

        mode, coord = attr("mode", "nearest"), attr("coordinate_transformation_mode", "half_pixel")
        nearest = attr("nearest_mode", "round_prefer_floor")
        x, y = self._move(node)
        src, dst = self.m.tensors[x].shape, self.m.tensors[y].shape
        if len(src) != 4 or src[0] != dst[0] or src[3] != dst[3]:
            raise InputError(f"TFLite export: Resize {node.name!r} must resize the spatial axes of a 4-D map")
        size = self.m.const(f"{node.name}_size", np.asarray(dst[1:3], np.int32))
        if mode == "nearest" and coord == "asymmetric" and nearest == "floor":
            self.m.op("RESIZE_NEAREST_NEIGHBOR", [x, size], [y], node.name, align_corners=False,
                      half_pixel_centers=False)
            return
        integer = all(d % s == 0 for d, s in zip(dst[1:3], src[1:3]))
        if mode == "nearest" and integer and coord in ("half_pixel", "pytorch_half_pixel") \
                and nearest in ("round_prefer_ceil", "round_prefer_floor"):
            # integer upsampling: half-pixel centres pick floor((dst + 0.5) / f) with either rounding
            self.m.op("RESIZE_NEAREST_NEIGHBOR", [x, size], [y], node.name, align_corners=False,
                      half_pixel_centers=True)
            return
        if mode == "linear" and coord in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric") \
                and all(d > 1 for d in dst[1:3]):
            self.m.op("RESIZE_BILINEAR", [x, size], [y], node.name, align_corners=coord == "align_corners",
                      half_pixel_centers=coord in ("half_pixel", "pytorch_half_pixel"))
            return
        raise InputError(f"TFLite export: Resize {node.name!r} ({mode}, {coord}, {nearest}) has no TFLite "
                         "form here (nearest-neighbour upsampling and bilinear resizing are supported)")

    def op_reducemean(self, node: Node) -> None:
        axes = node.attrs.get("axes")
        if axes is None:
            a = _const(node, 1)
            axes = None if a is None else [int(v) for v in a]
        rank = len(node.inputs[0].type.shape)  # type: ignore[union-attr]
        if axes is None:
            axes = list(range(rank))
        if not (self.nhwc4(rank) and sorted(int(a) % 4 for a in axes) == [2, 3] and node.attrs.get("keepdims", 1)):
            return self.mean(node, [int(a) % rank for a in axes])  # type: ignore[attr-defined]
        x, y = self._move(node)
        _, h, w, _ = self.m.tensors[x].shape
        self.m.op("AVERAGE_POOL_2D", [x], [y], node.name, padding="VALID", stride_w=1, stride_h=1,
                  filter_w=w, filter_h=h, activation="NONE")

    def op_prelu(self, node: Node) -> None:
        slope = _const(node, 1)
        if slope is None:
            dq = self.dq_const(node.inputs[1])  # type: ignore[attr-defined]
            if dq is None:
                raise InputError(f"TFLite export: PRelu {node.name!r} needs constant slopes")
            q, s, z, _ = dq
            slope = (q.astype(np.float32) - z.astype(np.float32)) * s
        x = self.value(node.inputs[0], node)  # type: ignore[attr-defined]
        y, _ = self.out_tensor(node)  # type: ignore[attr-defined]
        rank = len(self.m.tensors[x].shape)
        arr = np.asarray(slope, np.float32)
        arr = arr.reshape((1,) * (rank - arr.ndim) + arr.shape)
        if self.nhwc4(rank):
            arr = arr.transpose(NHWC)
        qp = const_operand_params(arr)
        qa = np.clip(np.rint(arr / np.float32(qp.scale)) + int(qp.zero_point), -128, 127).astype(np.int8)
        alpha = self.m.const(f"{node.name}_alpha", np.ascontiguousarray(qa[0] if self.nhwc4(rank) else qa), [qp.scale],
                             [int(qp.zero_point)])
        self.m.op("PRELU", [x, alpha], [y], node.name)

    def op_convtranspose(self, node: Node) -> None:
        x = self.value(node.inputs[0], node)  # type: ignore[attr-defined]
        w = self.dq_const(node.inputs[1])  # type: ignore[attr-defined]
        if w is None or w[0].ndim != 4 or int(node.attrs.get("group", 1)) != 1:
            raise InputError(f"TFLite export: ConvTranspose {node.name!r} needs constant 2-D int8 weights, group 1")
        wq, ws, wz, _ = w
        if np.any(wz != 0) or any(d != 1 for d in node.attrs.get("dilations", [1, 1])) \
                or any(node.attrs.get("output_padding", [0, 0])):
            raise InputError(f"TFLite export: ConvTranspose {node.name!r} with dilation or output_padding "
                             "has no TRANSPOSE_CONV form")
        c_out = wq.shape[1]
        y, act = self.out_tensor(node)  # type: ignore[attr-defined]
        fused, fold = self._act(act, node)  # type: ignore[attr-defined]
        if fold is not None:
            raise InputError(f"TFLite export: ConvTranspose {node.name!r} with a fused HardSigmoid")
        ws = np.broadcast_to(np.asarray(ws, np.float32).reshape(-1), (c_out,)).astype(np.float32)
        b = self._bias(node, 2, c_out, x, ws)  # type: ignore[attr-defined]
        strides = list(node.attrs.get("strides", [1, 1]))
        kh, kw = wq.shape[2], wq.shape[3]
        pads = list(node.attrs.get("pads", [0, 0, 0, 0]))
        in_shape, out_shape = self.m.tensors[x].shape, self.m.tensors[y].shape
        padding = None
        if not any(pads) and all(out_shape[1 + d] == (in_shape[1 + d] - 1) * strides[d] + (kh, kw)[d] for d in range(2)):
            padding = "VALID"
        else:
            ok = True
            for d, k in enumerate((kh, kw)):
                total = k - strides[d]
                ok &= total >= 0 and pads[d] == total // 2 and pads[d + 2] == total - total // 2 \
                    and out_shape[1 + d] == in_shape[1 + d] * strides[d]
            padding = "SAME" if ok else None
        if padding is None:
            raise InputError(f"TFLite export: ConvTranspose {node.name!r} pads {pads} are neither SAME nor VALID")
        wt = self.m.const(f"{node.name}_weights", np.ascontiguousarray(wq.transpose(1, 2, 3, 0)), ws,
                          np.zeros(c_out, np.int64), 0)
        shape = self.m.const(f"{node.name}_output_shape", np.asarray(out_shape, np.int32))
        self.m.op("TRANSPOSE_CONV", [shape, wt, x, b], [y], node.name, padding=padding, stride_w=strides[1],
                  stride_h=strides[0], activation=fused)
