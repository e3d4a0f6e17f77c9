"""House rules from ARCHITECTURE.md, checked by walking the AST of every module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "nodes", "app")
FORBIDDEN_IN_CORE = ("PySide6", "pyqtgraph", "app", "shiboken6")


def _modules(pkg: str) -> list[Path]:
    return sorted((ROOT / pkg).rglob("*.py"))


def _imports(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _dynamic_imports(tree: ast.AST) -> list[str]:
    """Module names given as strings to importlib.import_module, __import__ or import_module."""
    names = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        f = node.func
        fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if fname in ("import_module", "__import__", "find_spec") and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            names.append(node.args[0].value)
    return names


def _module_strings(tree: ast.AST) -> list[str]:
    """String constants that look like dotted module names (a name list fed to importlib)."""
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and n.value.replace(".", "").replace("_", "").isalnum() and "." in n.value]


# Who may import whom: a staircase, nodes/ at the bottom.
LAYER_FORBIDDEN = {"nodes": ("engine", "app"), "engine": ("app",)}


@pytest.mark.parametrize("pkg", sorted(LAYER_FORBIDDEN))
def test_layers_form_a_staircase(pkg):
    """nodes/ imports neither engine/ nor app/, engine/ never reaches app/: at module level, inside
    functions, under TYPE_CHECKING, or by a module name handed to importlib/__import__."""
    bad = []
    for path in _modules(pkg):
        tree = ast.parse(path.read_text())
        names = _imports(tree) + _dynamic_imports(tree) + _module_strings(tree)
        for name in names:
            if name.split(".")[0] in LAYER_FORBIDDEN[pkg]:
                bad.append(f"{path.relative_to(ROOT)} reaches {name}")
    assert not bad, "\n".join(bad)


GC_OR_INTERPRETER_CALLS = {("gc", "disable"), ("gc", "enable"), ("gc", "freeze"), ("gc", "unfreeze"),
                           ("gc", "set_threshold"), ("sys", "setswitchinterval"), ("sys", "setrecursionlimit")}


@pytest.mark.parametrize("pkg", ["engine", "nodes"])
def test_core_never_tunes_the_interpreter(pkg):
    """Garbage-collector and interpreter settings are process-wide: library code never changes them."""
    bad = []
    for path in _modules(pkg):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) \
                    and (node.func.value.id, node.func.attr) in GC_OR_INTERPRETER_CALLS:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.value.id}.{node.func.attr}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("pkg", ["engine", "nodes"])
def test_core_never_imports_qt_or_app(pkg):
    bad = []
    for path in _modules(pkg):
        for name in _imports(ast.parse(path.read_text())):
            if name.split(".")[0] in FORBIDDEN_IN_CORE:
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


def test_no_module_over_800_lines():
    big = []
    for pkg in (*PACKAGES, "tests", "assets"):
        for path in _modules(pkg):
            n = len(path.read_text().splitlines())
            if n > 800:
                big.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not big, "\n".join(big)


def test_no_print_in_product_code():
    bad = []
    for pkg in PACKAGES:
        for path in _modules(pkg):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "print() in product code: " + ", ".join(bad)
