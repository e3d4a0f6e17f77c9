"""Recurrent layers: LSTM, GRU and RNN (ONNX gate layouts, directions, sequence_lens, layout).

The input projections of all time steps are one matmul; only the recurrent product runs per
step, vectorized over the batch. Padded steps (t >= sequence_lens[b]) leave the state alone
and write zeros to Y.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from nodes.registry import register
from nodes.spec import AttrSpec, NodeContext, OpError, OpSpec, Port, RunContext, Work
from nodes.types import Dim, TensorType

Act = Callable[[np.ndarray], np.ndarray]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x).astype(x.dtype, copy=False)


# name -> (function of (x, alpha, beta), number of alphas, number of betas, default alpha, beta)
_ACTIVATIONS: dict[str, tuple[Callable[[np.ndarray, float, float], np.ndarray], int, int, float, float]] = {
    "relu": (lambda x, a, b: np.maximum(x, 0), 0, 0, 0.0, 0.0),
    "tanh": (lambda x, a, b: np.tanh(x), 0, 0, 0.0, 0.0),
    "sigmoid": (lambda x, a, b: _sigmoid(x), 0, 0, 0.0, 0.0),
    "affine": (lambda x, a, b: x * x.dtype.type(a) + x.dtype.type(b), 1, 1, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, x * x.dtype.type(a)), 1, 0, 0.01, 0.0),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0).astype(x.dtype), 1, 0, 1.0, 0.0),
    "scaledtanh": (lambda x, a, b: x.dtype.type(a) * np.tanh(x * x.dtype.type(b)), 1, 1, 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: np.clip(x * x.dtype.type(a) + x.dtype.type(b), 0, 1), 1, 1, 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, x.dtype.type(a) * np.expm1(np.minimum(x, 0))), 1, 0, 1.0, 0.0),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), 0, 0, 0.0, 0.0),
    "softplus": (lambda x, a, b: _softplus(x), 0, 0, 0.0, 0.0),
}


def activations(names: Sequence[str] | None, alphas: Sequence[float] | None, betas: Sequence[float] | None,
                defaults: Sequence[str], num_dir: int) -> list[list[Act]]:
    """Per direction, the activation functions with their alpha/beta bound.

    Alphas and betas are consumed in order by the functions that take them (as onnxruntime
    does); a list naming only one direction's functions is used for both directions.
    """
    k = len(defaults)
    names = list(names) if names else list(defaults) * num_dir
    if len(names) == k and num_dir == 2:
        names = names * 2
    if len(names) != k * num_dir:
        raise OpError(f"activations {names} must name {k} function(s) per direction ({num_dir})")
    al, be = list(alphas or []), list(betas or [])
    funcs: list[Act] = []
    for name in names:
        entry = _ACTIVATIONS.get(str(name).lower())
        if entry is None:
            raise OpError(f"unsupported activation {name!r}")
        fn, na, nb, da, db = entry
        a = al.pop(0) if na and al else da
        b = be.pop(0) if nb and be else db
        funcs.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return [funcs[d * k:(d + 1) * k] for d in range(num_dir)]


def _num_dir(direction: str) -> int:
    if direction not in ("forward", "reverse", "bidirectional"):
        raise OpError(f"direction must be forward, reverse or bidirectional, got {direction!r}")
    return 2 if direction == "bidirectional" else 1


def _run_direction(xw: np.ndarray, lens: np.ndarray | None, reverse: bool, state: tuple[np.ndarray, ...],
                   step: Callable[[np.ndarray, tuple[np.ndarray, ...]], tuple[np.ndarray, ...]],
                   ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Run ``step`` over time; returns Y (T, B, H) and the final state (state[0] is H)."""
    t_len, batch = xw.shape[:2]
    hid = state[0].shape[-1]
    y = np.zeros((t_len, batch, hid), dtype=state[0].dtype)
    if lens is None or bool(np.all(lens >= t_len)):
        for t in (range(t_len - 1, -1, -1) if reverse else range(t_len)):
            state = step(xw[t], state)
            y[t] = state[0]
        return y, state
    lens = np.clip(lens.astype(np.int64), 0, t_len)
    rows = np.arange(batch)
    for s in range(int(lens.max(initial=0))):
        active = s < lens
        t_idx = np.maximum(lens - 1 - s, 0) if reverse else np.full(batch, s)
        new = step(xw[t_idx, rows], state)
        mask = active[:, None]
        state = tuple(np.where(mask, n, o) for n, o in zip(new, state))
        y[t_idx[active], rows[active]] = new[0][active]
    return y, state


def lstm_cell(gt: np.ndarray, cp: np.ndarray, pd: np.ndarray | None, hid: int, f: Callable, g: Callable,
              h: Callable, clipf: Callable, coupled: bool) -> tuple[np.ndarray, np.ndarray]:
    """One LSTM step from the summed gate pre-activations ``gt`` (gates i, o, f, c) and the
    previous cell state: peepholes ``pd`` (i, o, f), clipping, input-forget coupling; (h, c)."""
    if pd is None and not coupled:  # i, o and f in one call of f (elementwise: the same numbers)
        iof = f(clipf(gt[:, :3 * hid]))
        c = iof[:, 2 * hid:] * cp + iof[:, :hid] * g(clipf(gt[:, 3 * hid:]))
        return iof[:, hid:2 * hid] * h(c), c
    gi, go, gf, gc = (gt[:, k * hid:(k + 1) * hid] for k in range(4))
    if pd is not None:
        gi = gi + pd[:hid] * cp
        gf = gf + pd[2 * hid:] * cp
    i = f(clipf(gi))
    fg = 1 - i if coupled else f(clipf(gf))
    c = fg * cp + i * g(clipf(gc))
    if pd is not None:
        go = go + pd[hid:2 * hid] * c
    o = f(clipf(go))
    return o * h(c), c


def sequence_dims(ctx: NodeContext, op_type: str) -> tuple[Dim, Dim, Dim]:
    """(seq, batch, input) of a recurrent op's X (layout 1 stores batch first)."""
    xs = ctx.shape(0)
    if xs is None:
        return None, None, None
    if len(xs) != 3:
        raise OpError(f"{op_type}: X must be 3-D, got shape {tuple(xs)}")
    return (xs[1], xs[0], xs[2]) if ctx.attrs["layout"] else tuple(xs)


class _RecurrentSpec(OpSpec):
    """Shared ports, attributes, inference and driver of LSTM/GRU/RNN."""

    family = "recurrent"
    gates = 1
    default_acts: tuple[str, ...] = ("Tanh",)
    n_states = 1  # hidden (and cell for LSTM)
    integer_weights = False  # True: make_step gets W[d], R[d] as stored (it quantizes its own products)
    common_attrs = (
        AttrSpec("activation_alpha", "floats", None, "Alphas of the activations, consumed in order."),
        AttrSpec("activation_beta", "floats", None, "Betas of the activations, consumed in order."),
        AttrSpec("activations", "strings", None, "Activation functions per direction."),
        AttrSpec("clip", "float", None, "Clip gate pre-activations to [-clip, clip]."),
        AttrSpec("direction", "string", "forward", "forward, reverse or bidirectional.",
                 choices=("forward", "reverse", "bidirectional")),
        AttrSpec("hidden_size", "int", None, "Number of hidden units (default: from R)."),
        AttrSpec("layout", "int", 0, "0: X is (seq, batch, in); 1: X is (batch, seq, in).", choices=(0, 1)),
    )

    # -- inference ---------------------------------------------------------------------------
    def _hidden(self, ctx: NodeContext) -> Dim:
        hs = ctx.attrs.get("hidden_size")
        if hs is not None:
            return int(hs)
        r = ctx.shape(2)
        if r is not None and len(r) == 3:
            return r[2]
        w = ctx.shape(1)
        if w is not None and len(w) == 3 and isinstance(w[1], int):
            return w[1] // self.gates
        return None

    def _dims(self, ctx: NodeContext) -> tuple[Dim, Dim, Dim, int, Dim]:
        """(seq, batch, input, num_directions, hidden)."""
        nd = _num_dir(ctx.attrs["direction"])
        seq, batch, inp = sequence_dims(ctx, self.op_type)
        ws = ctx.shape(1)
        hid = self._hidden(ctx)
        if ws is not None and len(ws) == 3:
            if isinstance(ws[0], int) and ws[0] != nd:
                raise OpError(f"{self.op_type}: W has {ws[0]} directions but direction implies {nd}")
            if isinstance(ws[1], int) and isinstance(hid, int) and ws[1] != self.gates * hid:
                raise OpError(f"{self.op_type}: W has {ws[1]} rows, expected {self.gates} x hidden {hid}")
            if isinstance(inp, int) and isinstance(ws[2], int) and ws[2] != inp:
                raise OpError(f"{self.op_type}: W expects input size {ws[2]}, X has {inp}")
        return seq, batch, inp, nd, hid

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Y (seq, dirs, batch, H) and final states (dirs, batch, H), batch-major for layout 1."""
        seq, batch, _, nd, hid = self._dims(ctx)
        dt = ctx.dtype(0)
        if ctx.attrs["layout"]:
            y, st = (batch, seq, nd, hid), (batch, nd, hid)
        else:
            y, st = (seq, nd, batch, hid), (nd, batch, hid)
        return [TensorType(dt, y)] + [TensorType(dt, st) for _ in range(len(ctx.node.outputs) - 1)]

    def work(self, ctx: NodeContext) -> Work:
        """MACs of all gate matmuls: dirs * seq * batch * gates*H * (input + H)."""
        w = super().work(ctx)
        seq, batch, inp, nd, hid = self._dims(ctx)
        if all(isinstance(d, int) for d in (seq, batch, inp, hid)):
            w.macs = nd * seq * batch * self.gates * hid * (inp + hid)  # type: ignore[operator]
        return w

    # -- execution ---------------------------------------------------------------------------
    def _state0(self, arr: np.ndarray | None, nd: int, batch: int, hid: int, layout: int,
                dt: np.dtype) -> np.ndarray:
        if arr is None:
            return np.zeros((nd, batch, hid), dtype=dt)
        arr = arr.astype(dt, copy=False)
        return arr.transpose(1, 0, 2) if layout else arr

    def _run(self, ctx: RunContext, x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None,
             lens: np.ndarray | None, init: Sequence[np.ndarray | None],
             make_step: Callable[..., Callable]) -> list[np.ndarray]:
        a = ctx.attrs
        layout = int(a.get("layout", 0))
        nd = _num_dir(a["direction"])
        out_dt = x.dtype
        dt = np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
        if layout:
            x = x.transpose(1, 0, 2)
        x = x.astype(dt, copy=False)
        _, batch, _ = x.shape
        hid = int(a["hidden_size"]) if a.get("hidden_size") is not None else int(r.shape[-1])
        if w.shape[0] != nd or w.shape[1] != self.gates * hid:
            raise OpError(f"{self.op_type}: W shape {w.shape} does not match {nd} direction(s) x "
                          f"{self.gates} gates x hidden {hid}")
        acts = activations(a.get("activations"), a.get("activation_alpha"), a.get("activation_beta"),
                           self.default_acts, nd)
        clip = a.get("clip")
        states0 = [self._state0(s, nd, batch, hid, layout, dt) for s in init]
        ys, finals = [], []
        for d in range(nd):
            reverse = a["direction"] == "reverse" or d == 1
            wd, rd = (w[d], r[d]) if self.integer_weights else (w[d].astype(dt, copy=False), r[d].astype(dt, copy=False))
            bd = b[d].astype(dt, copy=False) if b is not None else np.zeros(2 * self.gates * hid, dt)
            xw, step = make_step(x, wd, rd, bd, hid, acts[d], clip, d)
            y, state = _run_direction(xw, lens, reverse, tuple(s[d] for s in states0), step)
            ys.append(y)
            finals.append(state)
        y_all = np.stack(ys, axis=1)  # (T, dirs, B, H)
        outs = [y_all.transpose(2, 0, 1, 3) if layout else y_all]
        for k in range(len(init)):
            st = np.stack([f[k] for f in finals])  # (dirs, B, H)
            outs.append(st.transpose(1, 0, 2) if layout else st)
        return [o.astype(out_dt, copy=False) for o in outs]


def _clipper(clip: float | None) -> Callable[[np.ndarray], np.ndarray]:
    if clip is None:
        return lambda v: v
    c = float(clip)
    return lambda v: np.clip(v, -c, c)


def _project(ctx: RunContext, x: np.ndarray, w: np.ndarray, d: int, wd: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """X @ W[d]^T + bias for every time step at once: (T, B, G) (a few steps by a constant W:
    the direct kernel, matmul.weight_product)."""
    from nodes.matmul import weight_product

    t_len, batch, inp = x.shape
    rows = x.reshape(-1, inp)
    y = weight_product(ctx, rows, wd, 1, transposed=True, key=f"W{d}", source=w)
    if y is None:
        return (rows @ wd.T + bias).reshape(t_len, batch, -1)
    y += bias
    return y.reshape(t_len, batch, -1)


@register("LSTM", since=7)
class LSTMSpec(_RecurrentSpec):
    """Long short-term memory layer (gates i, o, f, c; optional peepholes)."""

    doc = "LSTM over a sequence: gates i, o, f, c; peepholes P; outputs Y, Y_h, Y_c."
    gates = 4
    default_acts = ("Sigmoid", "Tanh", "Tanh")
    inputs = (Port("X"), Port("W"), Port("R"), Port("B", optional=True), Port("sequence_lens", optional=True),
              Port("initial_h", optional=True), Port("initial_c", optional=True), Port("P", optional=True))
    outputs = (Port("Y", optional=True), Port("Y_h", optional=True), Port("Y_c", optional=True))
    attrs = (*_RecurrentSpec.common_attrs,
             AttrSpec("input_forget", "int", 0, "Couple the input and forget gates (f = 1 - i)."))

    def reference(self, ctx: RunContext, x: np.ndarray, w: np.ndarray, r: np.ndarray,
                  b: np.ndarray | None = None, lens: np.ndarray | None = None, h0: np.ndarray | None = None,
                  c0: np.ndarray | None = None, p: np.ndarray | None = None) -> list[np.ndarray]:
        """Y, Y_h, Y_c."""
        clipf = _clipper(ctx.attrs.get("clip"))
        coupled = bool(ctx.attrs.get("input_forget", 0))

        def make_step(x, wd, rd, bd, hid, acts, clip, d):
            f, g, h = acts
            xw = _project(ctx, x, w, d, wd, bd[:4 * hid] + bd[4 * hid:])
            rt = ctx.keep(f"R{d}", r, lambda: np.ascontiguousarray(rd.T))  # once per plan: 5.7 ms at 2048 x 512
            pd = p[d].astype(x.dtype) if p is not None else None

            def step(xt: np.ndarray, state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
                hp, cp = state
                return lstm_cell(xt + hp @ rt, cp, pd, hid, f, g, h, clipf, coupled)

            return xw, step

        return self._run(ctx, x, w, r, b, lens, [h0, c0], make_step)


@register("GRU", since=7)
class GRUSpec(_RecurrentSpec):
    """Gated recurrent unit layer (gates z, r, h; linear_before_reset)."""

    doc = "GRU over a sequence: gates z, r, h; linear_before_reset applies R_h before the reset gate."
    gates = 3
    default_acts = ("Sigmoid", "Tanh")
    inputs = (Port("X"), Port("W"), Port("R"), Port("B", optional=True), Port("sequence_lens", optional=True),
              Port("initial_h", optional=True))
    outputs = (Port("Y", optional=True), Port("Y_h", optional=True))
    attrs = (*_RecurrentSpec.common_attrs,
             AttrSpec("linear_before_reset", "int", 0, "Apply the reset gate after R_h (h_prev @ R_h + Rb_h)."))

    def reference(self, ctx: RunContext, x: np.ndarray, w: np.ndarray, r: np.ndarray,
                  b: np.ndarray | None = None, lens: np.ndarray | None = None,
                  h0: np.ndarray | None = None) -> list[np.ndarray]:
        """Y, Y_h."""
        clipf = _clipper(ctx.attrs.get("clip"))
        lbr = bool(ctx.attrs.get("linear_before_reset", 0))

        def make_step(x, wd, rd, bd, hid, acts, clip, d):
            f, g = acts
            wb, rb = bd[:3 * hid], bd[3 * hid:]
            bias = wb + np.concatenate([rb[:2 * hid], np.zeros(hid, x.dtype) if lbr else rb[2 * hid:]])
            xw = _project(ctx, x, w, d, wd, bias)
            rzr = ctx.keep(f"Rzr{d}", r, lambda: np.ascontiguousarray(rd[:2 * hid].T))
            rh = ctx.keep(f"Rh{d}", r, lambda: np.ascontiguousarray(rd[2 * hid:].T))
            rbh = rb[2 * hid:]

            def step(xt: np.ndarray, state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
                (hp,) = state
                zr = xt[:, :2 * hid] + hp @ rzr
                z = f(clipf(zr[:, :hid]))
                rg = f(clipf(zr[:, hid:]))
                if lbr:
                    hh = g(clipf(xt[:, 2 * hid:] + rg * (hp @ rh + rbh)))
                else:
                    hh = g(clipf(xt[:, 2 * hid:] + (rg * hp) @ rh))
                return ((1 - z) * hh + z * hp,)

            return xw, step

        return self._run(ctx, x, w, r, b, lens, [h0], make_step)


@register("RNN", since=7)
class RNNSpec(_RecurrentSpec):
    """Simple (Elman) recurrent layer."""

    doc = "Simple RNN over a sequence: H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)."
    gates = 1
    default_acts = ("Tanh",)
    inputs = (Port("X"), Port("W"), Port("R"), Port("B", optional=True), Port("sequence_lens", optional=True),
              Port("initial_h", optional=True))
    outputs = (Port("Y", optional=True), Port("Y_h", optional=True))
    attrs = _RecurrentSpec.common_attrs

    def reference(self, ctx: RunContext, x: np.ndarray, w: np.ndarray, r: np.ndarray,
                  b: np.ndarray | None = None, lens: np.ndarray | None = None,
                  h0: np.ndarray | None = None) -> list[np.ndarray]:
        """Y, Y_h."""
        clipf = _clipper(ctx.attrs.get("clip"))

        def make_step(x, wd, rd, bd, hid, acts, clip, d):
            (f,) = acts
            xw = _project(ctx, x, w, d, wd, bd[:hid] + bd[hid:])
            rt = ctx.keep(f"R{d}", r, lambda: np.ascontiguousarray(rd.T))

            def step(xt: np.ndarray, state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
                return (f(clipf(xt + state[0] @ rt)),)

            return xw, step

        return self._run(ctx, x, w, r, b, lens, [h0], make_step)
