"""#18 (4): process-wide interpreter state (GIL switch interval, the garbage collector) has one
owner, app/runtime.py, applied once at start-up; engine/ and nodes/ never touch it."""

from __future__ import annotations

import ast
import sys

from tests.test_architecture import ROOT, _modules

TUNING = {("sys", "setswitchinterval"), ("gc", "disable"), ("gc", "enable"), ("gc", "freeze"), ("gc", "unfreeze"),
          ("gc", "set_threshold"), ("gc", "collect")}


def _tuning_calls(path) -> list[str]:
    tree = ast.parse(path.read_text())
    imported = {a.asname or a.name: (node.module, a.name) for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module in ("gc", "sys") for a in node.names}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in TUNING:
            out.append(f"{path.relative_to(ROOT)}:{node.lineno} {f.value.id}.{f.attr}")
        elif isinstance(f, ast.Name) and imported.get(f.id) in TUNING:
            out.append(f"{path.relative_to(ROOT)}:{node.lineno} {f.id}")
    return out


def test_only_app_runtime_changes_the_interpreters_gc_and_switch_interval():
    found = [c for pkg in ("engine", "nodes", "app") for p in _modules(pkg) for c in _tuning_calls(p)
             if not str(p).endswith("app/runtime.py")]
    assert not found, "interpreter tuning outside app/runtime.py: " + ", ".join(found)


def test_opening_the_editor_applies_the_settings_once(qapp, settings):
    import gc

    from app import runtime
    from app.main_window import MainWindow

    win = MainWindow(settings=settings, restore_state=False, default_target=None)
    assert sys.getswitchinterval() == runtime.GUI_SWITCH_INTERVAL_S
    with runtime.collections_paused():
        with runtime.collections_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # an inner holder ending does not re-enable collections early
    assert gc.isenabled()
    win.close()
