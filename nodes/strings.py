"""String tensors (dtype object, one Python str per element) and text features:
StringConcat, StringSplit, RegexFullMatch, StringNormalizer and TfIdfVectorizer.

StringConcat joins two broadcast string tensors elementwise. StringSplit splits each element
at ``delimiter`` (runs of whitespace when it is empty or absent, leading/trailing whitespace
ignored) at most ``maxsplit`` times; the pieces fill a new last axis padded with "" to the
longest split, and a second output counts the pieces. RegexFullMatch is true where the whole
element matches ``pattern`` (Python's re, which agrees with RE2 on the common syntax).
StringNormalizer drops the elements equal to a stopword, then changes case. TfIdfVectorizer
counts n-grams of a pool per row (see its doc).
"""

from __future__ import annotations

import re

import numpy as np

from nodes._util import broadcast_shapes
from nodes.registry import register
from nodes.spec import REQUIRED, AttrSpec, NodeContext, OpError, OpSpec, Port, RunContext
from nodes.types import TensorType

_STR = np.dtype(object)


def _strings(x: np.ndarray, op: str) -> np.ndarray:
    if x.dtype != _STR and x.dtype.kind not in "US":
        raise OpError(f"{op} expects a string tensor, got {x.dtype}")
    return x.astype(object)


@register("StringConcat", since=20)
class StringConcatSpec(OpSpec):
    """X + Y per element, with numpy broadcasting."""

    family = "strings"
    doc = "Concatenates two string tensors elementwise (broadcasting)."
    inputs = (Port("X"), Port("Y"))
    outputs = (Port("Z"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Broadcast shape, string type."""
        a, b = ctx.shape(0), ctx.shape(1)
        return [TensorType(_STR, broadcast_shapes(a, b) if a is not None and b is not None else None)]

    def reference(self, ctx: RunContext, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """np.char-free: object arrays add as str concatenation."""
        return np.asarray(np.add(_strings(x, "StringConcat"), _strings(y, "StringConcat")), dtype=object)


@register("StringSplit", since=20)
class StringSplitSpec(OpSpec):
    """Split every element into substrings along a new last axis."""

    family = "strings"
    doc = "Splits each string at delimiter (whitespace when empty); pads with \"\" and counts the pieces."
    inputs = (Port("X"),)
    outputs = (Port("Y"), Port("Z"))
    attrs = (AttrSpec("delimiter", "string", "", "Separator (empty: runs of whitespace)."),
             AttrSpec("maxsplit", "int", None, "At most this many splits per element."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Y: X's shape plus an axis for the pieces; Z: X's shape, int64."""
        s = ctx.shape(0)
        return [TensorType(_STR, None if s is None else (*s, None)), TensorType(np.dtype(np.int64), s)]

    def reference(self, ctx: RunContext, x: np.ndarray) -> list[np.ndarray]:
        """str.split per element, padded to the longest."""
        x = _strings(x, "StringSplit")
        sep = ctx.attrs.get("delimiter") or None
        maxsplit = ctx.attrs.get("maxsplit")
        limit = -1 if maxsplit is None else int(maxsplit)
        pieces = [str(s).split(sep, limit) for s in x.ravel()]
        width = max((len(p) for p in pieces), default=0)
        y = np.full((len(pieces), width), "", dtype=object)
        for i, p in enumerate(pieces):
            y[i, :len(p)] = p
        counts = np.array([len(p) for p in pieces], dtype=np.int64)
        return [y.reshape(*x.shape, width), counts.reshape(x.shape)]


@register("RegexFullMatch", since=20)
class RegexFullMatchSpec(OpSpec):
    """Whether each element matches a regular expression as a whole."""

    family = "strings"
    doc = "True where the whole string matches pattern."
    inputs = (Port("X"),)
    outputs = (Port("Y"),)
    attrs = (AttrSpec("pattern", "string", REQUIRED, "The regular expression."),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """bool, X's shape."""
        return [TensorType(np.dtype(bool), ctx.shape(0))]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """re.fullmatch per element."""
        try:
            rx = re.compile(str(ctx.attrs["pattern"]))
        except re.error as exc:
            raise OpError(f"RegexFullMatch: bad pattern {ctx.attrs['pattern']!r}: {exc}") from None
        x = _strings(x, "RegexFullMatch")
        return np.array([rx.fullmatch(str(s)) is not None for s in x.ravel()], dtype=bool).reshape(x.shape)


@register("StringNormalizer", since=10)
class StringNormalizerSpec(OpSpec):
    """Drops stopwords from a string vector (or a [1, C] matrix) and changes case."""

    family = "strings"
    doc = ("Removes the elements equal to a stopword (case-insensitively unless is_case_sensitive), "
           "then lower- or upper-cases the rest; when nothing is left the output is one empty string.")
    inputs = (Port("X"),)
    outputs = (Port("Y"),)
    attrs = (AttrSpec("case_change_action", "string", "NONE", "NONE, LOWER or UPPER.",
                      choices=("NONE", "LOWER", "UPPER")),
             AttrSpec("is_case_sensitive", "int", 0, "1: stopwords match case-sensitively."),
             AttrSpec("locale", "string", "", "Locale of the case change (Python's rules are used)."),
             AttrSpec("stopwords", "strings", None, "Words to remove."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Strings of the input's rank; the kept count is known only when running."""
        s = ctx.shape(0)
        return [TensorType(_STR, None if s is None else (*s[:-1], None))]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """Filter, then change case."""
        x = _strings(x, "StringNormalizer")
        if (x.ndim == 2 and x.shape[0] != 1) or x.ndim not in (1, 2):
            raise OpError(f"StringNormalizer takes [C] or [1, C], got shape {x.shape}")
        action = ctx.attrs.get("case_change_action") or "NONE"
        if action not in ("NONE", "LOWER", "UPPER"):
            raise OpError(f"StringNormalizer: unknown case_change_action {action!r}")
        sensitive = bool(int(ctx.attrs.get("is_case_sensitive") or 0))
        stops = list(ctx.attrs.get("stopwords") or [])
        stop_set = set(stops) if sensitive else {w.lower() for w in stops}
        kept = [str(s) for s in x.ravel() if (str(s) if sensitive else str(s).lower()) not in stop_set]
        if action == "LOWER":
            kept = [s.lower() for s in kept]
        elif action == "UPPER":
            kept = [s.upper() for s in kept]
        out = np.array(kept or [""], dtype=object)
        return out.reshape(1, -1) if x.ndim == 2 else out


@register("TfIdfVectorizer", since=9)
class TfIdfVectorizerSpec(OpSpec):
    """Counts the pool's n-grams (optionally with skips) per row, then weights the counts."""

    family = "strings"
    doc = ("Per row of tokens (ints or strings), counts each pool n-gram of length min..max_gram_length, "
           "also with up to max_skip_count tokens skipped between items (unigrams once), into column "
           "ngram_indexes[k] of the k-th pool n-gram; TF keeps counts, IDF gives weight (or 1) where "
           "the count is positive, TFIDF multiplies counts by the weights.")
    inputs = (Port("X"),)
    outputs = (Port("Y"),)
    attrs = (AttrSpec("max_gram_length", "int", REQUIRED, "Longest n-gram counted."),
             AttrSpec("min_gram_length", "int", REQUIRED, "Shortest n-gram counted."),
             AttrSpec("max_skip_count", "int", REQUIRED, "Most tokens skipped between n-gram items."),
             AttrSpec("mode", "string", REQUIRED, "TF, IDF or TFIDF.", choices=("TF", "IDF", "TFIDF")),
             AttrSpec("ngram_counts", "ints", REQUIRED, "Start of the 1-grams, 2-grams ... in the pool."),
             AttrSpec("ngram_indexes", "ints", REQUIRED, "Output column of each pool n-gram."),
             AttrSpec("pool_int64s", "ints", None, "The n-grams, flattened (integer tokens)."),
             AttrSpec("pool_strings", "strings", None, "The n-grams, flattened (string tokens)."),
             AttrSpec("weights", "floats", None, "Per output column weight (IDF, TFIDF)."))

    def _pool(self, a: dict) -> tuple[dict[tuple, int], int]:
        """n-gram -> output column, for the counted lengths; and the output width."""
        pool = list(a.get("pool_int64s") or a.get("pool_strings") or [])
        counts = [int(c) for c in a["ngram_counts"]]
        cols = [int(c) for c in a["ngram_indexes"]]
        lo, hi = int(a["min_gram_length"]), int(a["max_gram_length"])
        table: dict[tuple, int] = {}
        k = 0
        for size, start in enumerate(counts, start=1):
            end = counts[size] if size < len(counts) else len(pool)
            for j in range(start, end - size + 1, size):
                if k >= len(cols):
                    raise OpError("TfIdfVectorizer: ngram_indexes is shorter than the pool")
                if lo <= size <= hi:
                    table[tuple(pool[j:j + size])] = cols[k]
                k += 1
        return table, (max(cols) + 1 if cols else 0)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """float32 (B, width) for a [B, C] input, (width,) for [C]."""
        _, width = self._pool(ctx.attrs)
        s = ctx.shape(0)
        shape = None if s is None else ((width,) if len(s) <= 1 else (s[0], width))
        return [TensorType(np.dtype(np.float32), shape)]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """Count per row and skip distance, then weight."""
        a = ctx.attrs
        table, width = self._pool(a)
        if x.ndim > 2:
            raise OpError(f"TfIdfVectorizer takes [C] or [B, C], got shape {x.shape}")
        rows = x.reshape(1, -1) if x.ndim < 2 else x
        lo, hi, skips = int(a["min_gram_length"]), int(a["max_gram_length"]), int(a["max_skip_count"])
        freq = np.zeros((rows.shape[0], width), np.int64)
        for r, row in enumerate(rows):
            tokens = [str(t) if isinstance(t, str) else int(t) for t in row.tolist()]
            for skip in range(1, skips + 2):
                first = lo if skip == 1 else max(lo, 2)  # unigrams are counted once
                for start in range(len(tokens)):
                    for n in range(first, hi + 1):
                        last = start + (n - 1) * skip
                        if last >= len(tokens):
                            break
                        col = table.get(tuple(tokens[start:last + 1:skip]))
                        if col is not None:
                            freq[r, col] += 1
        mode = a["mode"]
        w = np.asarray(a.get("weights") or [], np.float32)
        if mode == "TF":
            y = freq.astype(np.float32)
        elif mode == "IDF":
            y = np.where(freq > 0, w[:width] if w.size else np.float32(1), np.float32(0)).astype(np.float32)
        elif mode == "TFIDF":
            y = (freq * (w[:width] if w.size else np.float32(1))).astype(np.float32)
        else:
            raise OpError(f"TfIdfVectorizer: unknown mode {mode!r}")
        return y if x.ndim == 2 else y.reshape(width)
