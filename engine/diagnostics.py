"""Diagnostics: every decision or problem the engine reports, as data the GUI and CLI render."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

ERROR = "error"
WARNING = "warning"
INFO = "info"


@dataclass(frozen=True)
class Diagnostic:
    """One finding: severity (error/warning/info), the node it concerns, a code and a message."""

    severity: str
    node: str | None
    code: str
    message: str

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    def __str__(self) -> str:
        where = f" [{self.node}]" if self.node else ""
        return f"{self.severity}{where} {self.code}: {self.message}"
