"""Training losses that exported models sometimes keep: NegativeLogLikelihoodLoss and
SoftmaxCrossEntropyLoss.

input (N, C, d1, ..., dk) holds per-class scores (log-probabilities for NLL), target
(N, d1, ..., dk) class indices. loss[n, d] = -input[n, target[n, d], d] * w[target[n, d]],
where w is the optional per-class weight (1 without it) and a target equal to
``ignore_index`` contributes 0 with weight 0. reduction "none" keeps the loss tensor, "sum"
adds it up, "mean" divides the sum by the sum of the weights used (by the number of elements
when there are neither weights nor ignore_index). SoftmaxCrossEntropyLoss applies log_softmax
over the class axis first and can return those log-probabilities as a second output.
"""

from __future__ import annotations

import numpy as np

from nodes.registry import register
from nodes.spec import AttrSpec, NodeContext, OpError, OpSpec, Port, RunContext
from nodes.types import TensorType

_REDUCTIONS = ("none", "sum", "mean")


def _nll(x: np.ndarray, target: np.ndarray, weight: np.ndarray | None, reduction: str,
         ignore_index: int | None) -> np.ndarray:
    if x.ndim < 2:
        raise OpError(f"input must have rank >= 2 (N, C, ...), got shape {x.shape}")
    n, c = x.shape[:2]
    if target.shape != (n, *x.shape[2:]):
        raise OpError(f"target shape {target.shape} does not fit input shape {x.shape}")
    t = target.reshape(n, -1).astype(np.int64)
    valid = t != ignore_index if ignore_index is not None else np.ones(t.shape, bool)
    if np.any((t[valid] < 0) | (t[valid] >= c)):
        raise OpError(f"target holds a class index outside [0, {c})")
    safe = np.where(valid, t, 0)
    picked = np.take_along_axis(x.reshape(n, c, -1), safe[:, None, :], axis=1)[:, 0, :]
    loss = np.where(valid, -picked, x.dtype.type(0)).astype(x.dtype)
    w = None
    if weight is not None:
        w = np.where(valid, np.asarray(weight)[safe], 0).astype(x.dtype)
    elif ignore_index is not None:
        w = valid.astype(x.dtype)
    if w is not None:
        loss = (loss * w).astype(x.dtype)
    loss = loss.reshape(target.shape)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(loss.sum(), dtype=x.dtype)
    if w is not None:
        return np.asarray(loss.sum() / w.sum(), dtype=x.dtype)
    return np.asarray(loss.mean(), dtype=x.dtype)


class _LossSpec(OpSpec):
    family = "losses"
    attrs = (
        AttrSpec("reduction", "string", "mean", "none, sum or mean.", choices=_REDUCTIONS),
        AttrSpec("ignore_index", "int", None, "A target value that contributes nothing."),
    )

    def _reduction(self, attrs: dict) -> str:
        r = attrs.get("reduction", "mean")
        if r not in _REDUCTIONS:
            raise OpError(f"reduction must be one of {', '.join(_REDUCTIONS)}, got {r!r}")
        return r

    def _loss_type(self, ctx: NodeContext) -> TensorType:
        if self._reduction(ctx.attrs) == "none":
            return TensorType(ctx.dtype(0), ctx.shape(1))
        return TensorType(ctx.dtype(0), ())


@register("NegativeLogLikelihoodLoss", since=12)
class NegativeLogLikelihoodLossSpec(_LossSpec):
    """-input[n, target[n, ...], ...], weighted and reduced."""

    doc = "Negative log-likelihood of the target classes (input holds log-probabilities), reduced."
    inputs = (Port("input"), Port("target"), Port("weight", optional=True))
    outputs = (Port("loss"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """A scalar (sum, mean) or the target's shape (none), of the input's dtype."""
        return [self._loss_type(ctx)]

    def reference(self, ctx: RunContext, x: np.ndarray, target: np.ndarray,
                  weight: np.ndarray | None = None) -> np.ndarray:
        """Gather, weight, reduce."""
        return _nll(x, target, weight, self._reduction(ctx.attrs), ctx.attrs.get("ignore_index"))


@register("SoftmaxCrossEntropyLoss", since=12)
class SoftmaxCrossEntropyLossSpec(_LossSpec):
    """NegativeLogLikelihoodLoss of log_softmax(scores) over the class axis."""

    doc = "Cross-entropy of softmax(scores) over axis 1 against the labels; optionally returns the log-probabilities."
    inputs = (Port("scores"), Port("labels"), Port("weights", optional=True))
    outputs = (Port("output"), Port("log_prob", optional=True))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """The loss, and log_prob of the scores' type."""
        return [self._loss_type(ctx), ctx.type(0)][:max(len(ctx.node.outputs), 1)]

    def reference(self, ctx: RunContext, scores: np.ndarray, labels: np.ndarray,
                  weights: np.ndarray | None = None) -> list[np.ndarray]:
        """log_softmax (max-shifted), then the NLL loss."""
        if scores.ndim < 2:
            raise OpError(f"scores must have rank >= 2 (N, C, ...), got shape {scores.shape}")
        shifted = scores - scores.max(axis=1, keepdims=True)
        log_prob = (shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))).astype(scores.dtype)
        loss = _nll(log_prob, labels, weights, self._reduction(ctx.attrs), ctx.attrs.get("ignore_index"))
        return [loss, log_prob]
