"""Exceptions users see: each carries the one-line message the CLI prints after 'error:'."""

from __future__ import annotations


class ModelError(ValueError):
    """The model (or a file or option about it) is unusable; the message says why in one line."""


class InputError(ValueError):
    """User-supplied data or options are wrong (a feed, a calibration file, a target file)."""


class ExecutionError(ValueError):
    """Running a graph failed; the message names the node."""


class InternalError(Exception):
    """A bug in NPU Studio, not in the user's input: a kernel raised an exception no check meant.

    Deliberately not a ValueError, so code that handles bad input never swallows it; the CLI
    prints it as "internal error" with exit status 1.
    """


class Cancelled(Exception):
    """Long work stopped because the user asked (a cancel callback returned True, or the editor's
    task was cancelled); not an error, so never reported as one."""
