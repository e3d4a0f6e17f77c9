"""Regenerate the documentation in docs/ from the code: the one script for every generated part.

    python tools/gen_docs.py                # rewrite docs/cli.md and every generated slot
    python tools/gen_docs.py --check        # exit 1 and name the pages that are out of date
    python tools/gen_docs.py --screenshots  # also re-render the editor screenshots in docs/img/

docs/cli.md is written whole from ``engine.cli.build_parser()``. Every other page is written
by hand with slots (``<!-- gen:KIND ARG -->`` ... ``<!-- /gen -->``) that this script fills by
running the real commands on the bundled demos (tools/docgen/pages.py lists the kinds).
tests/test_docs.py regenerates everything in memory and compares, so the pages always show
what the current code prints. Screenshots are not compared (pixels depend on fonts); the
test only checks that every image a page links exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DOCS = ROOT / "docs"

# (image under docs/img, model, target, calibration or None): the editor as the guides show it.
SCREENSHOTS = (
    ("slow-transformer-ethos-u55.png", "assets/models/transformer_demo.onnx", "ethos-u55", None),
    ("int8-digits-phone-npu.png", "assets/models/digits_cnn.onnx", "phone-npu", "assets/data/digits_calib.npz"),
)
SCREENSHOT_WIDTH = 1200


def render_all(docs: Path = DOCS) -> dict[Path, str]:
    """Path -> the text it should have, for docs/cli.md and every page with slots."""
    import engine  # noqa: F401  (loads the op registry in the right order)
    from engine.cli import build_parser
    from tools.docgen.cli_ref import cli_markdown
    from tools.docgen.pages import pages, render_page

    texts = {docs / "cli.md": cli_markdown(build_parser())}
    for path in pages(docs):
        texts[path] = render_page(path.relative_to(docs).as_posix(), path.read_text(encoding="utf-8"))
    return texts


def stale(docs: Path = DOCS) -> list[Path]:
    """The pages whose text differs from what the generator produces."""
    return [p for p, text in render_all(docs).items()
            if not p.is_file() or p.read_text(encoding="utf-8") != text]


def render_screenshots(docs: Path = DOCS) -> list[Path]:
    """Render the editor offscreen for every SCREENSHOTS entry, scaled down to stay small."""
    from PIL import Image

    written = []
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    (docs / "img").mkdir(exist_ok=True)
    for name, model, target, calib in SCREENSHOTS:
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / name
            cmd = [sys.executable, "-m", "engine", "gui", model, "--target", target, "--screenshot", str(raw)]
            if calib:
                cmd += ["--calib", calib]
            subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
            img = Image.open(raw).convert("RGB")
            if img.width > SCREENSHOT_WIDTH:
                img = img.resize((SCREENSHOT_WIDTH, round(img.height * SCREENSHOT_WIDTH / img.width)),
                                 Image.Resampling.LANCZOS)
            dest = docs / "img" / name
            img.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(dest, optimize=True)
            written.append(dest)
    return written


def main(argv: list[str]) -> int:
    if "--check" in argv:
        paths = stale()
        for p in paths:
            sys.stdout.write(f"out of date: {p.relative_to(ROOT)}\n")
        if paths:
            sys.stdout.write("run: python tools/gen_docs.py\n")
        return 1 if paths else 0
    for path, text in render_all().items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            sys.stdout.write(f"wrote {path.relative_to(ROOT)}\n")
    if "--screenshots" in argv:
        for p in render_screenshots():
            sys.stdout.write(f"wrote {p.relative_to(ROOT)} ({p.stat().st_size:,} bytes)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
