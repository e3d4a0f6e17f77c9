"""Fill the generated slots of the hand-written pages in docs/.

A page is Markdown written by people, with slots the generator owns::

    <!-- gen:run npu-studio simulate assets/models/digits_cnn.onnx --target phone-npu -->
    (replaced by the command and what it printed)
    <!-- /gen -->

Slot kinds (the text after the kind is its argument):

``run CMD``            the command line and its stdout/stderr, as a terminal shows them
``json SCHEMA CMD``    the command's ``--json`` document (lists cut to 3 entries), marked with
                       the schema in docs/schemas/ that tests/test_docs.py validates it with;
                       ``SCHEMA:KEY,KEY`` shows (and validates) only those top-level keys
``file SCHEMA PATH``   a file an earlier command of the page wrote (``-`` for no schema)
``layers PATH``        the per-layer table of a quantize report an earlier command wrote
``python-output``      what the ```python blocks since the previous such slot printed
``NAME``               a named part: target-fields, target-table, vela-ratios, project-example,
                       tflite-example, sweep-example, editor-shortcuts

Commands of one page run in order in one sandbox (tools/docgen/sandbox.py), so a later slot
can show a file an earlier command wrote. Wall-clock fields are written as 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.docgen import features, targets_ref
from tools.docgen.sandbox import Sandbox, json_block, shorten, zero_text_timings, zero_timings

SLOT = re.compile(r"<!-- gen:(?P<kind>[a-z-]+)(?: (?P<arg>[^\n]*?))? -->\n(?P<body>.*?)<!-- /gen -->", re.S)
PYTHON_BLOCK = re.compile(r"^```python\n(?P<code>.*?)^```$", re.S | re.M)
ITEMS = 3


class PageError(Exception):
    """A slot the generator cannot fill (unknown kind, failing command, missing file)."""


class Page:
    """State shared by the slots of one page: the sandbox and the Python namespace."""

    def __init__(self, name: str, sandbox: Sandbox) -> None:
        self.name = name
        self.sandbox = sandbox
        self.namespace: dict[str, Any] = {"__name__": "__docs__"}
        self.python_blocks = 0

    def run(self, command: str, expect: int | None = 0) -> Any:
        result = self.sandbox.run(command)
        if expect is not None and result.status != expect:
            raise PageError(f"{self.name}: `{command}` exited {result.status}: {result.stderr.strip()}")
        return result


def _text_block(text: str) -> str:
    return f"```text\n{text}{'' if text.endswith(chr(10)) else chr(10)}```\n"


def slot_run(page: Page, arg: str) -> str:
    """``run CMD``; a command expected to fail is written ``run! CMD`` (exit status shown)."""
    expect: int | None = 0
    if arg.startswith("! "):
        arg, expect = arg[2:], None
    result = page.run(arg, expect)
    if arg.split()[1:2] == ["optimize"]:
        result.stdout = zero_text_timings(result.stdout)
    return _text_block(result.transcript())


def slot_json(page: Page, arg: str) -> str:
    """``json SCHEMA CMD``; ``json SCHEMA:KEY,KEY CMD`` shows only those top-level keys."""
    schema, command = arg.split(" ", 1)
    schema, _, keys = schema.partition(":")
    result = page.run(command)
    doc = zero_timings(json.loads(result.stdout))
    if keys:
        wanted = keys.split(",")
        missing = [k for k in wanted if k not in doc]
        if missing:
            raise PageError(f"{page.name}: `{command}` printed no {', '.join(missing)}")
        doc = {k: doc[k] for k in wanted}
    marker = f"schemas/{schema}.json" + (f" keys={keys}" if keys else "")
    return f"```text\n$ {command}\n```\n\n" + json_block(shorten(doc, ITEMS), marker)


def slot_file(page: Page, arg: str) -> str:
    schema, rel = arg.split(" ", 1)
    path = page.sandbox.path / rel
    if not path.is_file():
        raise PageError(f"{page.name}: {rel} was not written by an earlier command of the page")
    text = path.read_text(encoding="utf-8")
    if rel.endswith((".json", ".npuproj")):
        doc = shorten(zero_timings(json.loads(text)), ITEMS)
        return json_block(doc, None if schema == "-" else f"schemas/{schema}.json")
    lang = "yaml" if rel.endswith((".yaml", ".yml")) else "text"
    return f"```{lang}\n{text}{'' if text.endswith(chr(10)) else chr(10)}```\n"


def slot_layers(page: Page, arg: str) -> str:
    path = page.sandbox.path / arg
    if not path.is_file():
        raise PageError(f"{page.name}: {arg} was not written by an earlier command of the page")
    report = json.loads(path.read_text(encoding="utf-8"))
    lines = ["| Layer | Op | SQNR accumulated (dB) | SQNR isolated (dB) | cosine accumulated | max abs error |",
             "|---|---|---:|---:|---:|---:|"]
    for r in report["layers"]:
        iso = r.get("isolated") or {}
        lines.append(f"| `{r['node']}` | {r['op_type']} | {r['sqnr_db']:.2f} | {iso.get('sqnr_db', float('nan')):.2f} | "
                     f"{r['cosine']:.5f} | {r['max_abs_err']:.4g} |")
    for name, o in report["outputs"].items():
        lines.append(f"| output `{name}` | | {o['sqnr_db']:.2f} | | {o['cosine']:.5f} | {o.get('max_abs_err', 0):.4g} |")
    return "\n".join(lines) + "\n"


def slot_python_output(page: Page, arg: str, code: list[str]) -> str:
    printed = ""
    for snippet in code:
        page.python_blocks += 1
        printed += page.sandbox.exec_python(snippet, page.namespace, f"{page.name} python block {page.python_blocks}")
    return _text_block(printed or "(nothing printed)\n")


NAMED: dict[str, Callable[[Page], str]] = {
    "target-fields": lambda page: targets_ref.field_table(),
    "target-table": lambda page: targets_ref.bundled_table(),
    "vela-ratios": lambda page: targets_ref.vela_ratios(),
    "project-example": features.project_example,
    "tflite-example": features.tflite_example,
    "sweep-example": features.sweep_example,
    "editor-shortcuts": features.editor_shortcuts,
}


def render_page(name: str, text: str) -> str:
    """The page with every slot regenerated (raises PageError on a slot that cannot be filled)."""
    out: list[str] = []
    pos = 0
    pending_code: list[str] = []
    with Sandbox() as sandbox:
        page = Page(name, sandbox)
        for m in SLOT.finditer(text):
            literal = text[pos:m.start()]
            out.append(literal)
            pending_code += [c.group("code") for c in PYTHON_BLOCK.finditer(literal)]
            kind, arg = m.group("kind"), (m.group("arg") or "").strip()
            if kind == "run":
                body = slot_run(page, arg)
            elif kind == "json":
                body = slot_json(page, arg)
            elif kind == "file":
                body = slot_file(page, arg)
            elif kind == "layers":
                body = slot_layers(page, arg)
            elif kind == "python-output":
                body, pending_code = slot_python_output(page, arg, pending_code), []
            elif kind in NAMED:
                body = NAMED[kind](page)
            else:
                raise PageError(f"{name}: unknown slot kind {kind!r}")
            header = f"<!-- gen:{kind}{' ' + arg if arg else ''} -->\n"
            out.append(f"{header}{body}<!-- /gen -->")
            pos = m.end()
        out.append(text[pos:])
    return "".join(out)


def pages(docs: Path) -> list[Path]:
    """Every hand-written page (Markdown) under docs/, cli.md excluded (fully generated)."""
    return [p for p in sorted(docs.rglob("*.md")) if p.name != "cli.md" or p.parent != docs]
