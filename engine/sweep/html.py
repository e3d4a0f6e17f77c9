"""OUTDIR/sweep.html: a self-contained Pareto chart (latency vs output SQNR) and the table.

Inline SVG only: no script, no stylesheet or font from elsewhere, so the page opens offline and
can be mailed. One color per hardware configuration; hovering a point shows its row (an SVG
``<title>``); the Pareto front (no other point is both faster and more accurate) is drawn as a
line and its points are marked in the table.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from engine.sweep.results import parse_row

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#7f7f7f")


def config_label(row: dict[str, Any], varied: list[str]) -> str:
    """The hardware configuration of a row: target name and its varied fields."""
    parts = [str(row.get("target", ""))]
    parts += [f"{k}={row[k]}" for k in varied if row.get(k) not in (None, "")]
    return " ".join(parts)


def pareto_front(points: list[tuple[float, float, int]]) -> list[int]:
    """Indices of (latency, sqnr, index) points no other point beats on both (lower latency,
    higher SQNR), ordered by latency."""
    front, best = [], float("-inf")
    for _lat, sq, i in sorted(points, key=lambda t: (t[0], -t[1])):
        if sq > best:
            front.append(i)
            best = sq
    return front


def _svg(rows: list[dict[str, Any]], varied: list[str], colors: dict[str, str]) -> str:
    pts = [(r["latency_us"], r["output_sqnr_db"], i) for i, r in enumerate(rows)
           if r.get("latency_us") is not None and r.get("output_sqnr_db") is not None]
    w, h, ml, mr, mt, mb = 720, 420, 70, 20, 20, 50
    if not pts:
        return '<p class="empty">No point has both a latency and an SQNR yet.</p>'
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    x0, x1 = (x0 * 0.95, x1 * 1.05) if x1 > x0 else (x0 * 0.9 - 1, x1 * 1.1 + 1)
    y0, y1 = (y0 - 0.05 * (y1 - y0), y1 + 0.05 * (y1 - y0)) if y1 > y0 else (y0 - 1, y1 + 1)

    def sx(x: float) -> float:
        return ml + (x - x0) / (x1 - x0) * (w - ml - mr)

    def sy(y: float) -> float:
        return h - mb - (y - y0) / (y1 - y0) * (h - mt - mb)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">',
             f'<rect x="{ml}" y="{mt}" width="{w - ml - mr}" height="{h - mt - mb}" fill="#fafafa" stroke="#ccc"/>']
    for k in range(5):
        xv = x0 + (x1 - x0) * k / 4
        yv = y0 + (y1 - y0) * k / 4
        parts.append(f'<text x="{sx(xv):.1f}" y="{h - mb + 18}" text-anchor="middle" font-size="11">{xv:.4g}</text>')
        parts.append(f'<text x="{ml - 6}" y="{sy(yv) + 4:.1f}" text-anchor="end" font-size="11">{yv:.3g}</text>')
    parts.append(f'<text x="{(w + ml) / 2}" y="{h - 10}" text-anchor="middle" font-size="12">latency (us)</text>')
    parts.append(f'<text x="16" y="{(h - mb) / 2}" text-anchor="middle" font-size="12" '
                 f'transform="rotate(-90 16 {(h - mb) / 2})">output SQNR (dB)</text>')
    front = pareto_front(pts)
    line = " ".join(f"{sx(rows[i]['latency_us']):.1f},{sy(rows[i]['output_sqnr_db']):.1f}" for i in front)
    parts.append(f'<polyline points="{line}" fill="none" stroke="#555" stroke-dasharray="4 3"/>')
    for lat, sq, i in pts:
        r = rows[i]
        tip = (f"{r['model']} on {config_label(r, varied)}\n{r['method']} {r['dtype']}"
               f"{' per-channel' if r.get('per_channel') else ''}\nlatency {lat:.4g} us, SQNR {sq:.3g} dB, "
               f"cosine {r.get('cosine')}")
        color = colors[config_label(r, varied)]
        parts.append(f'<circle cx="{sx(lat):.1f}" cy="{sy(sq):.1f}" r="6" fill="{color}" fill-opacity="0.8" '
                     f'stroke="#222" stroke-width="{1.5 if i in front else 0.5}"><title>{html.escape(tip)}</title>'
                     "</circle>")
    parts.append("</svg>")
    return "".join(parts)


def render(header: list[str], raw_rows: list[dict[str, Any]], varied: list[str]) -> str:
    """The page as a string."""
    rows = [parse_row({k: ("" if v is None else str(v)) for k, v in r.items()}) for r in raw_rows]
    labels = list(dict.fromkeys(config_label(r, varied) for r in rows))
    colors = {lab: PALETTE[i % len(PALETTE)] for i, lab in enumerate(labels)}
    pts = [(r["latency_us"], r["output_sqnr_db"], i) for i, r in enumerate(rows)
           if r.get("latency_us") is not None and r.get("output_sqnr_db") is not None]
    front = set(pareto_front(pts))
    legend = "".join(f'<span class="key"><span class="dot" style="background:{c}"></span>{html.escape(lab)}</span>'
                     for lab, c in colors.items())
    shown = [c for c in header if c not in ("key", "target_file")]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ["pareto", *shown])
    body = []
    for i, (r, raw) in enumerate(zip(rows, raw_rows)):
        cells = "".join(f"<td>{html.escape('' if raw.get(c) is None else str(raw.get(c)))}</td>" for c in shown)
        cls = ' class="error"' if r.get("error") else ""
        body.append(f"<tr{cls}><td>{'&#9733;' if i in front else ''}</td>{cells}</tr>")
    failed = sum(1 for r in rows if r.get("error"))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>NPU Studio sweep</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; font-size: 12px; }}
th, td {{ border: 1px solid #ddd; padding: 3px 6px; text-align: right; }}
tr.error td {{ color: #b00; }}
.key {{ margin-right: 14px; font-size: 12px; }}
.dot {{ display: inline-block; width: 10px; height: 10px; border-radius: 5px; margin-right: 4px; }}
</style></head><body>
<h1>Design-space sweep</h1>
<p>{len(rows)} point(s), {failed} failed. Lower latency and higher SQNR are better; the dashed line
and the starred rows are the Pareto front. Hover a point for its settings.</p>
<div>{legend}</div>
{_svg(rows, varied, colors)}
<h2>Results</h2>
<table><thead><tr>{head}</tr></thead><tbody>
{"".join(body)}
</tbody></table>
</body></html>
"""


def write_html(path: Path, header: list[str], rows: list[dict[str, Any]], varied: list[str]) -> None:
    """Write sweep.html (replaced atomically like results.csv)."""
    import os

    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(header, rows, varied), encoding="utf-8")
    os.replace(tmp, path)
