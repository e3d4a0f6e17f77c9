"""The model zoo: trained models from registry packages through every command.

One module-scoped run fills the matrix (model x command: ok / the one-line error); the test
prints it, and each model's row must be all ok. A model whose package is missing is a skip with
its reason. tools/gen_model_zoo.py writes the same matrix to docs/MODEL_ZOO.md.
"""

from __future__ import annotations

import pytest

from tests.zoo import MATRIX, locate
from tests.zoo_run import COMMANDS, format_matrix, run_cli_subprocess, run_matrix

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def zoo_runs(tmp_path_factory, qapp):
    present = [e for e in MATRIX if locate(e)[0] is not None]
    runs = run_matrix(present, tmp_path_factory.mktemp("zoo"))
    return {r.entry.name: r for r in runs}


def test_zoo_covers_at_least_twelve_models_from_five_packages():
    assert len(MATRIX) >= 12
    assert len({e.package for e in MATRIX}) >= 5


def test_zoo_prints_its_compatibility_matrix(zoo_runs, capsys):
    runs = [zoo_runs[e.name] for e in MATRIX if e.name in zoo_runs]
    with capsys.disabled():
        print("\n\nmodel zoo compatibility matrix\n" + format_matrix(runs))
        for r in runs:
            print(f"  {r.entry.name}: {r.figures}  seconds {r.seconds}")
    assert runs or all(locate(e)[0] is None for e in MATRIX)


@pytest.mark.parametrize("entry", MATRIX, ids=lambda e: e.name)
def test_zoo_model_passes_every_command(entry, zoo_runs):
    path, why = locate(entry)
    if path is None:
        pytest.skip(why)
    row = zoo_runs[entry.name].row
    failures = {c: row.get(c, "missing") for c in COMMANDS if row.get(c) != "ok"}
    assert not failures, f"{entry.name}: {failures}"


def test_a_zoo_model_opens_with_the_command_line_in_a_fresh_interpreter(tmp_path):
    present = [e for e in MATRIX if locate(e)[0] is not None]
    if not present:
        pytest.skip("no zoo package is installed")
    assert run_cli_subprocess(present[0], tmp_path) == "ok"


def test_makefile_installs_exactly_the_pinned_zoo_packages():
    import re

    from tests.zoo import PACKAGES, ROOT

    text = (ROOT / "Makefile").read_text()
    block = re.search(r"ZOO_PACKAGES :=(.*?)\n(?!\t)", text, re.S).group(1)
    pins = dict(p.split("==") for p in block.replace("\\", " ").split())
    assert pins == PACKAGES
    assert "--no-deps $(ZOO_PACKAGES)" in text
