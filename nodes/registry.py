"""The op registry: one OpSpec per (domain, op_type), registered exactly once."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from nodes.spec import OpSpec

_REGISTRY: dict[tuple[str, str], OpSpec] = {}

T = TypeVar("T", bound=type)


class RegistryError(RuntimeError):
    """An op was registered twice or looked up but never registered."""


def register_spec(spec: OpSpec) -> OpSpec:
    """Register an OpSpec instance; registering the same op twice raises."""
    key = (spec.domain, spec.op_type)
    if key in _REGISTRY:
        raise RegistryError(f"op {spec.op_type!r} (domain {spec.domain!r}) is registered twice")
    _REGISTRY[key] = spec
    return spec


def register(op_type: str, since: int = 1, domain: str = "", family: str = "") -> Callable[[T], T]:
    """Class decorator: ``@register("Conv", since=1)`` instantiates and registers the spec."""

    def deco(cls: T) -> T:
        cls.op_type = op_type  # type: ignore[attr-defined]
        cls.since = since  # type: ignore[attr-defined]
        cls.domain = domain  # type: ignore[attr-defined]
        if family:
            cls.family = family  # type: ignore[attr-defined]
        elif not getattr(cls, "family", ""):
            cls.family = cls.__module__.rsplit(".", 1)[-1]  # type: ignore[attr-defined]
        register_spec(cls())
        return cls

    return deco


def get(op_type: str, domain: str = "") -> OpSpec | None:
    """The spec of an op, or None when the op is not supported."""
    _ensure_loaded()
    return _REGISTRY.get(("" if domain == "ai.onnx" else domain, op_type))


def all_specs() -> list[OpSpec]:
    """Every registered spec, sorted by family then op type."""
    _ensure_loaded()
    return sorted(_REGISTRY.values(), key=lambda s: (s.family, s.domain, s.op_type))


def op_types() -> set[str]:
    """Names of all registered ops of the default ONNX domain."""
    _ensure_loaded()
    return {op for (dom, op) in _REGISTRY if dom == ""}


_loaded = False


def _ensure_loaded() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        import nodes.families  # noqa: F401  (registers every family)
