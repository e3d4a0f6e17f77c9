"""Detection post-processing: NonMaxSuppression.

Per batch and class, boxes whose score exceeds score_threshold are visited from the highest
score down (ties: lower index first); a box is kept unless its IoU with a box kept before is
above iou_threshold, until max_output_boxes_per_class are kept. IoU = area(A n B) /
(area(A) + area(B) - area(A n B)); boxes are [y1, x1, y2, x2] with corners in either order
(center_point_box=0) or [x_center, y_center, width, height] (center_point_box=1). A box of zero
area suppresses nothing. The result lists (batch, class, box) triples, batch by batch, class by
class, in selection order.
"""

from __future__ import annotations

import numpy as np

from nodes.registry import register
from nodes.spec import AttrSpec, NodeContext, OpError, OpSpec, Port, RunContext
from nodes.types import TensorType


def _corners(boxes: np.ndarray, center: bool) -> tuple[np.ndarray, ...]:
    """(y_min, x_min, y_max, x_max) of (..., 4) boxes."""
    b = boxes.astype(np.float64)
    if center:
        xc, yc, w, h = b[..., 0], b[..., 1], b[..., 2] / 2, b[..., 3] / 2
        return yc - h, xc - w, yc + h, xc + w
    y1, x1, y2, x2 = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)


def iou_matrix(boxes: np.ndarray, center: bool) -> np.ndarray:
    """IoU of every pair of (N, 4) boxes (0 where either area or the overlap is empty)."""
    y0, x0, y1, x1 = _corners(boxes, center)
    ih = np.minimum(y1[:, None], y1[None, :]) - np.maximum(y0[:, None], y0[None, :])
    iw = np.minimum(x1[:, None], x1[None, :]) - np.maximum(x0[:, None], x0[None, :])
    inter = np.where((ih > 0) & (iw > 0), ih * iw, 0.0)
    area = (y1 - y0) * (x1 - x0)
    union = area[:, None] + area[None, :] - inter
    ok = (inter > 0) & (area[:, None] > 0) & (area[None, :] > 0) & (union > 0)
    return np.where(ok, inter / np.where(ok, union, 1.0), 0.0)


def _scalar(x: np.ndarray | None, default: float) -> float:
    if x is None or np.size(x) == 0:
        return default
    return float(np.asarray(x).reshape(-1)[0])


@register("NonMaxSuppression", since=10)
class NonMaxSuppressionSpec(OpSpec):
    """Greedy per-class box selection by score with IoU suppression."""

    family = "detection"
    doc = ("Selects boxes per batch and class, best score first, dropping boxes that overlap a "
           "selected one by more than iou_threshold; returns (batch, class, box) index triples.")
    inputs = (Port("boxes"), Port("scores"), Port("max_output_boxes_per_class", optional=True),
              Port("iou_threshold", optional=True), Port("score_threshold", optional=True))
    outputs = (Port("selected_indices"),)
    attrs = (AttrSpec("center_point_box", "int", 0, "0: [y1, x1, y2, x2]; 1: [x_center, y_center, w, h]."),)
    deterministic = True

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """int64 (num_selected, 3); num_selected is known only when running."""
        return [TensorType(np.dtype(np.int64), (None, 3))]

    def reference(self, ctx: RunContext, boxes: np.ndarray, scores: np.ndarray,
                  max_out: np.ndarray | None = None, iou_threshold: np.ndarray | None = None,
                  score_threshold: np.ndarray | None = None) -> np.ndarray:
        """Greedy selection per (batch, class) on a precomputed IoU matrix."""
        if boxes.ndim != 3 or boxes.shape[2] != 4:
            raise OpError(f"boxes must be (batches, boxes, 4), got {boxes.shape}")
        if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
            raise OpError(f"scores {scores.shape} do not fit boxes {boxes.shape} (want (batches, classes, boxes))")
        limit = max(int(_scalar(max_out, 0)), 0)
        iou_t = _scalar(iou_threshold, 0.0)
        score_t = None if score_threshold is None or np.size(score_threshold) == 0 else _scalar(score_threshold, 0.0)
        center = bool(int(ctx.attrs.get("center_point_box") or 0))
        out: list[tuple[int, int, int]] = []
        if limit == 0:
            return np.zeros((0, 3), np.int64)
        for b in range(boxes.shape[0]):
            iou = iou_matrix(boxes[b], center)
            for c in range(scores.shape[1]):
                s = scores[b, c].astype(np.float64)
                order = np.argsort(-s, kind="stable")
                if score_t is not None:
                    order = order[s[order] > score_t]
                kept: list[int] = []
                for i in order:
                    if all(iou[i, j] <= iou_t for j in kept):
                        kept.append(int(i))
                        if len(kept) == limit:
                            break
                out.extend((b, c, i) for i in kept)
        return np.array(out, dtype=np.int64).reshape(-1, 3)
