"""The documentation in docs/ says what the code does.

- Every generated part (docs/cli.md from the parser, every example output and table in the
  other pages, the Python examples' output) is regenerated in memory with the real commands
  on the bundled demos and compared exactly with the file (tools/gen_docs.py).
- No link in README.md or docs/ leaves the repository or points to a missing file.
- Every JSON example validates against its schema in docs/schemas/, and so do the documents
  the commands write for real (full, not shortened).
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SCHEMAS = DOCS / "schemas"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
MARKED_JSON = re.compile(r"<!-- schema: (?P<schema>[\w./-]+)(?: keys=(?P<keys>[\w,]+))? -->\n```json\n(?P<body>.*?)\n```",
                         re.S)
ANY_JSON = re.compile(r"^```json\n", re.M)


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _validator(name: str, keys: list[str] | None = None):
    """The schema's validator; with ``keys`` (an excerpt) only those top-level keys are required."""
    schema = json.loads((DOCS / name).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    if keys is not None:
        schema = {**schema, "required": [k for k in schema.get("required", []) if k in keys]}
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def rendered() -> dict[Path, str]:
    from tools.gen_docs import render_all

    return render_all()


def test_every_generated_part_of_the_docs_matches_what_the_code_prints(rendered):
    assert DOCS / "cli.md" in rendered and len(rendered) >= 7
    stale = []
    for path, text in rendered.items():
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != text:
            old, new = current.splitlines(), text.splitlines()
            first = next((k for k, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
            stale.append(f"{path.relative_to(ROOT)} line {first + 1}: "
                         f"{(old[first] if first < len(old) else '<end>')!r} != "
                         f"{(new[first] if first < len(new) else '<end>')!r}")
    assert not stale, "docs out of date (run: python tools/gen_docs.py):\n" + "\n".join(stale)


def test_cli_reference_lists_every_command_and_option_of_the_parser():
    import argparse

    from engine.cli import build_parser

    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        assert f"## npu-studio {name}\n" in text
        section = text.split(f"## npu-studio {name}\n", 1)[1].split("\n## ", 1)[0]
        for action in p._actions:
            for opt in action.option_strings:
                if opt not in ("-h", "--help"):
                    assert f"`{opt}" in section, f"{name} {opt} missing from docs/cli.md"
    for status in ("| 0 |", "| 1 |", "| 2 |"):
        assert status in text


def test_no_link_in_the_readme_or_docs_leaves_the_repository_or_is_broken():
    problems = []
    for md in _markdown_files():
        text = re.sub(r"```.*?```", "", md.read_text(encoding="utf-8"), flags=re.S)
        for target in LINK.findall(text):
            where = f"{md.relative_to(ROOT)} -> {target}"
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                problems.append(f"{where}: points outside the repository")
                continue
            path_part = target.split("#", 1)[0]
            if not path_part:
                continue
            dest = (md.parent / path_part).resolve()
            if not dest.is_relative_to(ROOT):
                problems.append(f"{where}: points outside the repository")
            elif not dest.exists():
                problems.append(f"{where}: no such file")
    assert not problems, "\n".join(problems)


def test_readme_names_the_two_commands_first_and_links_into_docs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = text.split("```", 2)[1]
    assert [line.split()[0:2] for line in first_block.strip().splitlines()] == [["make", "run"], ["make", "test"]]
    assert "../shared" not in text and "CONTRACTS.md" not in text
    assert "docs/README.md" in text and "docs/cli.md" in text


def test_every_json_example_in_the_docs_validates_against_its_schema():
    checked = 0
    for md in sorted(DOCS.rglob("*.md")):
        text = md.read_text(encoding="utf-8")
        marked = list(MARKED_JSON.finditer(text))
        assert len(marked) == len(ANY_JSON.findall(text)), f"{md}: a ```json block without a schema marker"
        for m in marked:
            doc = json.loads(m.group("body"))
            keys = m.group("keys").split(",") if m.group("keys") else None
            if keys is not None:
                assert sorted(doc) == sorted(keys), f"{md}: excerpt of {keys} shows {sorted(doc)}"
            validator = _validator(m.group("schema"), keys)
            errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(doc)]
            assert not errors, f"{md.relative_to(ROOT)} example of {m.group('schema')}: {errors[:3]}"
            checked += 1
    assert checked >= 10


def test_real_outputs_in_full_validate_against_the_schemas(tmp_path, monkeypatch):
    """The shortened examples are not the whole story: the complete documents must validate too."""
    import yaml

    from engine.cli import Out, main

    monkeypatch.chdir(ROOT)
    digits, calib = "assets/models/digits_cnn.onnx", "assets/data/digits_calib.npz"

    def run(*argv: str) -> str:
        out, err = io.StringIO(), io.StringIO()
        assert main(list(argv), Out(out, err)) == 0, err.getvalue()
        return out.getvalue()

    def check(schema: str, doc) -> None:
        errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in _validator(f"schemas/{schema}.json").iter_errors(doc)]
        assert not errors, f"{schema}: {errors[:3]}"

    check("inspect", json.loads(run("inspect", digits, "--json")))
    check("simulate", json.loads(run("simulate", "assets/models/transformer_demo.onnx", "--target", "ethos-u55", "--json")))
    run("optimize", digits, "-o", str(tmp_path / "o.onnx"), "--report", str(tmp_path / "o.json"))
    check("optimize-report", json.loads((tmp_path / "o.json").read_text()))
    run("quantize", digits, "--calib", calib, "--target-sqnr", "45", "-o", str(tmp_path / "q.onnx"),
        "--report", str(tmp_path / "q.json"))
    report = json.loads((tmp_path / "q.json").read_text())
    assert "mixed_precision" in report
    check("quantize-report", report)
    run("compile", digits, "--target", "phone-npu", "--calib", calib, "-o", str(tmp_path / "b"))
    check("plan", json.loads((tmp_path / "b" / "plan.json").read_text()))
    check("manifest", json.loads((tmp_path / "b" / "manifest.json").read_text()))
    check("runtime", yaml.safe_load((tmp_path / "b" / "runtime.yaml").read_text()))


def test_schemas_reject_documents_missing_a_contract_key():
    """The schemas are not vacuous: each one refuses a document without its required keys."""
    for path in sorted(SCHEMAS.glob("*.json")):
        v = _validator(f"schemas/{path.name}")
        assert v.schema.get("required"), path.name
        assert list(v.iter_errors({})), f"{path.name} accepts an empty document"
    sim = _validator("schemas/simulate.json")
    op = {"node": "a", "op_type": "Relu", "device": "cpu", "start_us": 0, "latency_us": 1, "bound": "compute",
          "fallback_reason": None}
    doc = {"target": "t", "latency_us": 1, "ops": [op], "partitions": [], "transfers": [],
           "summary": {"npu_ops": 0, "cpu_ops": 1, "npu_us": 0, "cpu_us": 1, "transfer_us": 0}}
    assert list(sim.iter_errors(doc)), "a CPU op without a fallback_reason must not validate"
    op["fallback_reason"] = "not listed"
    assert not list(sim.iter_errors(doc))


def test_sweep_results_example_has_the_contract_columns_when_present():
    text = (DOCS / "formats.md").read_text(encoding="utf-8")
    block = re.search(r"```csv\n(.*?)```", text, re.S)
    if block is None:  # the sweep command is not in this build; the page says so
        assert "The `sweep` command is not in this build" in text
        return
    from tools.docgen.features import SWEEP_COLUMNS

    header = next(csv.reader(io.StringIO(block.group(1))))
    assert set(SWEEP_COLUMNS) <= set(header), set(SWEEP_COLUMNS) - set(header)


def test_the_example_target_in_targets_md_loads(tmp_path):
    from engine.hw.target import load_target

    text = (DOCS / "targets.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(name: my-npu\n.*?)```", text, re.S)
    assert block is not None
    path = tmp_path / "my-npu.yaml"
    path.write_text(block.group(1))
    target = load_target(path)
    assert target.name == "my-npu" and target.supports("Conv")


def test_every_page_is_reachable_from_the_docs_index():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for md in sorted(DOCS.rglob("*.md")):
        if md.name != "README.md":
            assert f"({md.relative_to(DOCS).as_posix()})" in index, f"docs/README.md does not link {md.name}"


def test_the_generator_notices_a_stale_page(tmp_path):
    """The staleness check can fail: a changed figure inside a slot is regenerated back."""
    from tools.docgen.pages import render_page

    page = "<!-- gen:run npu-studio simulate assets/models/digits_cnn.onnx --target phone-npu -->\nlatency 1 us\n<!-- /gen -->\n"
    out = render_page("probe.md", page)
    assert "latency 1 us" not in out and "$ npu-studio simulate" in out and "per inference" in out


_RUN_SLOT = re.compile(r"<!-- gen:run (?P<cmd>npu-studio [^\n]*?) -->\n```text\n(?P<body>.*?)```\n<!-- /gen -->", re.S)
_FRESH = """
import io, json, sys
from engine.cli import Out, main
results = []
for command in json.loads(sys.argv[1]):
    import shlex
    out, err = io.StringIO(), io.StringIO()
    status = main(shlex.split(command)[1:], Out(out, err))
    results.append([status, out.getvalue(), err.getvalue()])
sys.stdout.write(json.dumps(results))
"""


def test_a_reader_following_the_int8_guide_gets_the_figures_it_shows(tmp_path):
    """The guide's commands, typed from a fresh clone's root, print exactly what the guide shows.

    Run in a new interpreter (not the test process), in a folder holding only a copy of the
    bundled assets; the first command through ``python -m engine`` itself, the rest through
    engine.cli.main in one process (the console script's entry point) to keep this fast.
    """
    import os
    import shutil
    import subprocess
    import sys

    for part in ("models", "data", "targets"):
        shutil.copytree(ROOT / "assets" / part, tmp_path / "assets" / part)
    (tmp_path / "out").mkdir()
    guide = (DOCS / "guides" / "why-did-int8-break.md").read_text(encoding="utf-8")
    slots = [(m.group("cmd"), m.group("body")) for m in _RUN_SLOT.finditer(guide)]
    assert len(slots) >= 8 and any("--percentile 90" in c for c, _ in slots)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    first_cmd, first_body = slots[0]
    proc = subprocess.run([sys.executable, "-m", "engine", *first_cmd.split()[1:]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"$ {first_cmd}\n{proc.stdout}{proc.stderr}" == first_body

    proc = subprocess.run([sys.executable, "-c", _FRESH, json.dumps([c for c, _ in slots[1:]])], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for (command, body), (status, out, err) in zip(slots[1:], json.loads(proc.stdout)):
        shown = f"$ {command}\n{out}{err}" + (f"(exit status {status})\n" if status else "")
        assert shown == body, f"{command}: the guide shows\n{body}\nbut it prints\n{shown}"
