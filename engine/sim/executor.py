"""The numpy executor: runs a Graph with each op's reference kernel.

A plan (topological order, resolved attributes, last use of every value) is built once per
graph version. Values are freed after their last use unless every intermediate is asked for.
Steps that read only constants (initializers, Constant nodes) run once per plan. An op whose
kernel can write in place (``OpSpec.inplace``: elementwise arithmetic, activations,
BatchNormalization) is handed an input that dies at that node as its output buffer, when
nothing else references that buffer (checked per run by reference count: a view, a hook's
copy or a caller's array keeps it), so a chain of elementwise ops reuses one buffer.
"""

from __future__ import annotations

import sys
from collections import ChainMap, Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import ExecutionError, InputError, InternalError, ModelError
from engine.ir.fused import activation_fn
from engine.ir.graph import Graph, Node
from engine.sim.plan_fusion import PostOp, fuse_steps, run_post
from nodes import registry
from nodes.spec import NodeContext, OpError, OpSpec, RunContext
from nodes.types import TensorType

NodeHook = Callable[[Node, list[np.ndarray | None]], None]
"""Called after each node with its outputs (``run(..., hook=...)``)."""


@dataclass
class _Step:
    node: Node
    spec: OpSpec
    ctx: RunContext
    inputs: tuple[str | None, ...]
    outputs: tuple[str | None, ...]
    free: tuple[str, ...]
    activation: Callable[[np.ndarray], np.ndarray] | None = None  # a fused activation, run after the kernel
    donors: tuple[int, ...] = ()  # inputs that die here and may become the output buffer (inplace specs)
    post: tuple[PostOp, ...] = ()  # consumers fused into this step (fused plans: engine/sim/plan_fusion.py)
    fn: Callable[..., Any] | None = None  # spec.reference, bound once
    single: bool = False  # one output, written directly when the kernel returns an array
    out0: str | None = None


class _Plan:
    """The steps of one graph; ``fused`` plans (runs without a hook or keep_all) also fold
    BatchNormalization into Convs and run in-place consumers as post-ops (plan_fusion.py)."""

    def __init__(self, graph: Graph, executor: Executor, fused: bool = False,
                 keep: frozenset[str] = frozenset(), overridden: frozenset[str] = frozenset()) -> None:
        self.version = graph.version
        self.graph = graph
        self.fused = fused
        self.keep = keep  # values a run returns besides the outputs: never freed nor fused away
        # initializers the model lists as inputs and this plan's runs feed: values, not constants
        self.overridden = overridden
        steps: list[_Step] = []
        for node in graph.toposort():
            spec = registry.get(node.op_type, node.domain)
            if spec is None:
                from engine.unsupported import unsupported_message

                raise ExecutionError(unsupported_message(graph, node.op_type, node.domain))
            try:
                attrs = spec.resolve_attrs(node)
            except OpError as exc:
                raise ExecutionError(str(exc)) from exc
            opset = graph.opset(spec.domain)
            ctx = RunContext(node, attrs, opset, executor.run_subgraph)
            steps.append(_Step(node, spec, ctx,
                               tuple(v.name if v is not None else None for v in node.inputs),
                               tuple(v.name if v is not None else None for v in node.outputs),
                               (),
                               activation_fn(node, graph.opset("")) if node.activation else None))
        self.consts = {name: v.const for name, v in graph.initializers.items() if name not in overridden}
        # Steps that read only constants are computed once, on the first run, and cached (as a
        # runtime folds constants at session creation): ConstantOfShape weights, shape arithmetic.
        const_names = set(self.consts)
        self.const_steps: list[_Step] = []
        self.steps: list[_Step] = []
        for step in steps:
            if (step.spec.deterministic and not any(True for _ in step.node.subgraphs())
                    and all(n is None or n in const_names for n in step.inputs)):
                self.const_steps.append(step)
                const_names.update(n for n in step.outputs if n is not None)
            else:
                self.steps.append(step)
        self.consts_ready = False
        if not self.const_steps:
            self.schedule()

    def schedule(self) -> None:
        """Once the constants are known: fuse (fused plans), then when each value dies and
        which dying inputs an in-place kernel may overwrite."""
        graph = self.graph
        keep = {v.name for v in graph.outputs} | self.keep
        feeds = {v.name for v in graph.inputs} | self.overridden
        reads = [_step_reads(step) for step in self.steps]
        if self.fused:
            readers: Counter = Counter(n for r in reads for n in r)
            blocked = set(feeds)
            self.steps, folded = fuse_steps(self.steps, self.consts, readers, keep, blocked)
            self.consts.update(folded)
            reads = [_step_reads(step) for step in self.steps]
        local = feeds | {n for step in self.steps for n in step.outputs if n is not None}
        last_use: dict[str, int] = {}
        for k, names in enumerate(reads):
            for name in names:
                last_use[name] = k
        frees: list[list[str]] = [[] for _ in self.steps]
        for name, k in last_use.items():
            if name not in keep and name in local and name not in self.consts:
                frees[k].append(name)
        for step, free in zip(self.steps, frees):
            step.free = tuple(free)
            step.fn = step.fn or step.spec.reference  # a fusion may have set its own (plan_fusion.NormChain)
            step.single = len(step.outputs) == 1 and step.outputs[0] is not None
            step.out0 = step.outputs[0] if step.outputs else None
            if step.spec.inplace:  # never a feed (the caller's array) nor a constant
                step.donors = tuple(i for i, n in enumerate(step.inputs)
                                    if n in step.free and n not in feeds and step.inputs.count(n) == 1)
        self.consts_ready = True


def _step_reads(step: _Step) -> list[str]:
    names = [n for n in step.inputs if n is not None]
    for sg in step.node.subgraphs():
        for inner in sg.all_nodes():
            names.extend(v.name for v in inner.inputs if v is not None)
    return names


CONST_CACHE_BYTES = 1 << 30
"""Constant-only results cached per plan at most (beyond this they are recomputed every run)."""


def _refs_seen(args: list[Any]) -> int:
    a = args[0]
    return sys.getrefcount(a)


def _probe_held_by_run() -> int:
    local = {"v": np.empty(1)}
    return _refs_seen([local["v"]])


_HELD_BY_RUN = _probe_held_by_run()
"""References to a dying input while ``_donor`` looks at it and nobody else holds it: ``local``,
the argument list, ``_donor``'s own name for it and ``sys.getrefcount``'s argument (4 on
CPython 3.11; measured at import with the same layout, so an interpreter that counts
differently is followed). One more means a view or another holder (a hook, the caller)."""


def _donor(step: _Step, args: list[Any]) -> int:
    """The first of the step's donor inputs whose buffer nothing else references, else -1.

    The buffer is the array's own, or the base of a view (a Conv's reshaped matmul result, a
    Reshape of a dying value) that only this view references."""
    for i in step.donors:
        a = args[i]
        if isinstance(a, np.ndarray) and a.flags.writeable and sys.getrefcount(a) == _HELD_BY_RUN and (
                a.flags.owndata or (type(a.base) is np.ndarray and a.base.flags.owndata
                                    and a.flags.c_contiguous and a.size == a.base.size
                                    and sys.getrefcount(a.base) == 2)):
            return i
    return -1


def _execute(step: _Step, env: Mapping[str, Any], local: dict[str, Any], donate: bool = False) -> None:
    """Run one step: read its inputs from ``env``, write its outputs into ``local``; with
    ``donate`` a dying, unreferenced input may be overwritten by an in-place kernel."""
    try:
        args = [env[n] if n is not None else None for n in step.inputs]
    except KeyError as exc:
        raise ExecutionError(f"node {step.node.name!r} ({step.node.op_type}) reads "
                             f"{exc.args[0]!r}, which has no value") from None
    if step.donors:
        step.ctx.donate = _donor(step, args) if donate else -1
    try:
        res = step.spec.reference(step.ctx, *args)
        if step.activation is not None:
            res = [step.activation(_first(res))]
        if step.post:
            res = [run_post(step.post, _first(res))]
    except (ExecutionError, InputError, ModelError, InternalError):
        raise
    except OpError as exc:  # a check a spec makes on purpose: the model or its data is at fault
        raise ExecutionError(f"node {step.node.name!r} ({step.node.op_type}): {exc}") from exc
    except MemoryError:
        raise ExecutionError(f"node {step.node.name!r} ({step.node.op_type}) ran out of memory") from None
    except Exception as exc:
        refusal = _shape_rule_refusal(step, args)
        if refusal is not None:  # inputs the op's own shape rule refuses: the model is at fault
            raise ExecutionError(f"node {step.node.name!r} ({step.node.op_type}): {refusal}") from exc
        # inputs the op accepts and a kernel that fails on them: a bug in our kernel, not bad input
        raise InternalError(f"node {step.node.name!r} ({step.node.op_type}) raised "
                            f"{type(exc).__name__}: {exc}") from exc
    _store(step, res, local)


def _store(step: _Step, res: Any, local: dict[str, Any]) -> None:
    """Write a kernel's result (an array or a sequence of outputs) into ``local``."""
    outs = [np.asarray(res)] if isinstance(res, (np.ndarray, np.generic)) else list(res)
    for name, arr in zip(step.outputs, outs):
        if name is not None:
            # a list is a sequence and None an empty optional (nodes/sequence.py): kept as they are
            local[name] = arr if isinstance(arr, (np.ndarray, list)) or arr is None else np.asarray(arr)


def _nbytes(value: Any) -> int:
    """Bytes held by a run-time value: an array, a sequence (list) of them, or None."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, list):
        return sum(_nbytes(v) for v in value)
    return 0


def _shape_key(value: Any) -> Any:
    """What a plan's memory check depends on: an array's shape, a sequence's element shapes."""
    if isinstance(value, list):
        return ("seq", tuple(_shape_key(v) for v in value))
    return None if value is None else np.shape(value)


def _shape_rule_refusal(step: _Step, args: list[Any]) -> str | None:
    """The OpError text when the spec's inference refuses the actual inputs, else None.

    Asked only after a kernel failed: a kernel may rely on the checks its shape rule makes, so
    inputs that rule refuses (a broadcast mismatch in a graph whose shapes were unknown before
    running) are the model's fault, while a failure on inputs the rule accepts is a bug.
    """
    types = [None if a is None else TensorType.of(np.asarray(a)) if isinstance(a, (np.ndarray, np.generic))
             else None for a in args]
    try:
        step.spec.infer(NodeContext(step.node, step.spec, types, list(args)))
    except OpError as exc:
        return str(exc)
    except Exception:  # the rule itself cannot judge these inputs: keep the kernel's failure
        return None
    return None


def _first(res: Any) -> np.ndarray:
    return res if isinstance(res, np.ndarray) else np.asarray(next(iter(res)))


class Executor:
    """Runs graphs; one instance caches plans for a graph and its subgraphs."""

    def __init__(self, graph: Graph, max_bytes: int | None = None) -> None:
        from engine.sim.memory import default_memory_limit

        self.graph = graph
        self.max_bytes = max_bytes if max_bytes is not None else default_memory_limit()
        self._checked: set[tuple] = set()
        self._plans: dict[tuple[int, bool, frozenset[str], frozenset[str]], _Plan] = {}
        self._overridable: dict[int, tuple[int, frozenset[str]]] = {}  # id(graph) -> (version, its overridable names)
        self._env_stack: list[Mapping[str, Any]] = []
        self._hook: NodeHook | None = None
        self._hook_bodies = False
        self.fused_fallbacks = 0
        """Runs whose fused plan raised and were redone on the unfused plan (a bad model's
        error, or a fusion bug that would otherwise only show as a slower run)."""

    def _plan(self, graph: Graph, fused: bool = False, keep: frozenset[str] = frozenset(),
              overridden: frozenset[str] = frozenset()) -> _Plan:
        key = (id(graph), fused, keep, overridden)
        plan = self._plans.get(key)
        if plan is None or plan.version != graph.version:
            plan = _Plan(graph, self, fused, keep, overridden)
            self._plans[key] = plan
        return plan

    def _overridden(self, graph: Graph, feeds: Mapping[str, Any]) -> frozenset[str]:
        """The initializers that ``graph`` also lists as inputs (every initializer of an IR 3
        model) and ``feeds`` gives: a run without them treats them as the constants they hold
        (as onnxruntime does for IR < 4 and the optimizer by default), so Conv+BatchNormalization
        folds; a run that feeds one gets a plan where it is a value."""
        if not graph.overridable:
            return frozenset()
        names = self._overridable.get(id(graph))
        if names is None or names[0] != graph.version:  # per graph version, not per run
            names = self._overridable[id(graph)] = (graph.version, frozenset(graph.overridable))
        return frozenset(feeds.keys() & names[1])

    def run(self, feeds: Mapping[str, np.ndarray], keep_all: bool = False,
            hook: NodeHook | None = None, hook_bodies: bool = False,
            keep: Iterable[str] = ()) -> dict[str, np.ndarray]:
        """Execute the graph; returns the outputs (every value when ``keep_all``).

        ``keep`` names main-graph values returned besides the outputs (those the run computes).
        Unlike ``keep_all`` it leaves the run on the fused plan, which frees, reuses and fuses
        every other value: the per-layer analysis keeps each layer's inputs and output this way.

        Before the first run with given input shapes, the peak memory is estimated and a run
        that would exceed ``max_bytes`` is refused (ExecutionError) instead of exhausting the machine.
        ``hook`` sees the main graph's nodes, and with ``hook_bodies`` also every execution of a
        node inside an If/Loop/Scan body (a Loop body's nodes once per iteration).
        """
        key = (self.graph.version, self.max_bytes, tuple(sorted((k, _shape_key(v)) for k, v in feeds.items())))
        if key not in self._checked:
            from engine.sim.memory import check_memory

            check_memory(self.graph, feeds, self.max_bytes)
            self._checked.add(key)
        self._hook, self._hook_bodies = hook, hook_bodies
        try:
            return self._run(self.graph, feeds, ChainMap(), keep_all, frozenset(keep))
        finally:
            self._hook = None

    def scope(self) -> Mapping[str, Any]:
        """The values visible where the node being hooked runs (its graph's, then enclosing ones):
        a hook reads a node's inputs here. Only meaningful during a hook call."""
        if not self._env_stack:
            raise RuntimeError("Executor.scope() is only available while a graph runs")
        return self._env_stack[-1]

    def _fold_constants(self, plan: _Plan, outer: Mapping[str, Any]) -> None:
        """Compute the constant-only steps once and keep their outputs with the initializers."""
        local: dict[str, Any] = dict(plan.consts)
        env = ChainMap(local, outer) if outer else local
        cached = 0
        for k, step in enumerate(plan.const_steps):
            _execute(step, env, local)
            for n in step.outputs:
                if n is not None and n in local:
                    cached += _nbytes(local[n])
                    plan.consts[n] = local[n]
            if cached > CONST_CACHE_BYTES:  # too big to keep: the rest run every time
                plan.steps[:0] = plan.const_steps[k + 1:]
                break
        plan.const_steps = []
        plan.schedule()

    def run_subgraph(self, graph: Graph, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Run a subgraph (If/Loop body) that may read values of the enclosing scopes."""
        outer = self._env_stack[-1] if self._env_stack else ChainMap()
        res = self._run(graph, feeds, outer, False)
        return [res[v.name] for v in graph.outputs]

    def _run(self, graph: Graph, feeds: Mapping[str, np.ndarray], outer: Mapping[str, Any],
             keep_all: bool, keep: frozenset[str] = frozenset()) -> dict[str, np.ndarray]:
        hook = self._hook if graph is self.graph or self._hook_bodies else None
        fast = hook is None and not keep_all
        keep = frozenset() if keep_all else keep
        overridden = self._overridden(graph, feeds)
        plan = self._plan(graph, fast, keep, overridden)
        if not plan.consts_ready:
            self._fold_constants(plan, outer)
        local: dict[str, Any] = dict(plan.consts)
        # each run's own view of the caller's arrays: kernels keep what they prepare from an
        # input (a packed weight) while the same object comes in, so an array refilled in place
        # between runs must not be the same object as last run's (a weight fed as an input)
        feeds = {k: v.view() if type(v) is np.ndarray else v for k, v in feeds.items()}
        local.update(feeds)
        env = ChainMap(local, outer) if outer else local
        self._env_stack.append(env)
        try:
            if fast:
                try:
                    _run_steps(plan.steps, env, local)
                except Exception:  # the unfused plan says what failed, node by node
                    fast = False
                    self.fused_fallbacks += 1
            if not fast:
                if plan.fused:  # redo the run on the unfused plan (feeds and constants are never written)
                    plan = self._plan(graph, False, keep, overridden)
                    if not plan.consts_ready:
                        self._fold_constants(plan, outer)
                    local.clear()
                    local.update(plan.consts)
                    local.update(feeds)
                for step in plan.steps:
                    _execute(step, env, local, not keep_all)
                    if hook is not None:
                        hook(step.node, [local.get(n) if n is not None else None for n in step.outputs])
                    if not keep_all:
                        for name in step.free:
                            local.pop(name, None)
        finally:
            self._env_stack.pop()
        if keep_all:
            return dict(local)
        out = {name: local[name] for name in keep if name in local}
        for v in graph.outputs:
            if v.name not in env:
                raise ExecutionError(f"graph output {v.name!r} was never computed")
            out[v.name] = env[v.name]
        return out


def _run_steps(steps: list[_Step], env: Mapping[str, Any], local: dict[str, Any]) -> None:
    """The hot loop of a fused plan: no hook, no error wrapping (a failure is rerun on the
    unfused plan, whose messages name the node); kernels, donation and frees as in ``_execute``."""
    ndarray = np.ndarray
    for step in steps:
        args = [env[n] if n is not None else None for n in step.inputs]
        if step.donors:
            step.ctx.donate = _donor(step, args)
        res = step.fn(step.ctx, *args)
        if step.activation is not None:
            res = step.activation(_first(res))
        if step.post:
            res = run_post(step.post, _first(res))
        if step.single and type(res) is ndarray:
            local[step.out0] = res  # type: ignore[index]
        else:
            _store(step, res, local)
        res = args = None  # no reference of ours may stop the next step's donation
        for name in step.free:
            local.pop(name, None)
