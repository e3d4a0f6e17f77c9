"""report.html: one self-contained page (no network; charts are inline SVG).

Sections: summary, stage breakdown (the field notes' profiling template), per-op latency chart and
table, CPU fallbacks with reasons and suggested fixes, fused groups with provenance, quantization
error per layer (worst first), diagnostics.
"""

from __future__ import annotations

from html import escape
from typing import Any

NPU_COLOR = "#2e86de"
CPU_COLOR = "#e17055"
DMA_COLOR = "#a29bfe"
OTHER_COLOR = "#95a5a6"

CSS = """
body{font:14px/1.45 -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;color:#222;margin:0;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#666;margin-bottom:16px}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{background:#fff;border:1px solid #e1e4e8;border-radius:6px;padding:10px 14px;min-width:140px}
.card b{display:block;font-size:20px}.card span{color:#666;font-size:12px}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{border:1px solid #e1e4e8;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f2f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
.npu{color:#1b5fa8;font-weight:600}.cpu{color:#c0392b;font-weight:600}
.warning{color:#b9770e}.error{color:#c0392b}.info{color:#555}
svg text{font:11px Helvetica,Arial,sans-serif}
details{margin:6px 0}summary{cursor:pointer}
.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px;border-radius:2px}
"""


def _fmt_us(us: float) -> str:
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.1f} µs"


def _bar_chart(rows: list[tuple[str, float, str]], unit: str, width: int = 1000, bar_h: int = 16,
               label_w: int = 280) -> str:
    """Horizontal bars: (label, value, color); values drawn with their unit."""
    if not rows:
        return "<p>(nothing to chart)</p>"
    top = max(v for _, v, _ in rows) or 1.0
    plot_w = width - label_w - 90
    h = len(rows) * (bar_h + 4) + 8
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" role="img">']
    for i, (label, value, color) in enumerate(rows):
        y = 4 + i * (bar_h + 4)
        w = max(1.0, plot_w * value / top)
        short = label if len(label) <= 44 else "…" + label[-43:]
        parts.append(f'<text x="{label_w - 6}" y="{y + bar_h - 4}" text-anchor="end">{escape(short)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{color}"><title>'
                     f'{escape(label)}: {value:.3f} {unit}</title></rect>')
        parts.append(f'<text x="{label_w + w + 4:.1f}" y="{y + bar_h - 4}">{value:.1f} {unit}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _share_bar(parts: list[tuple[str, float, str]], width: int = 1000) -> str:
    total = sum(v for _, v, _ in parts) or 1.0
    x = 0.0
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="46" role="img">']
    for label, v, color in parts:
        w = width * v / total
        if w <= 0:
            continue
        out.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="22" fill="{color}"><title>{escape(label)}: '
                   f'{v:.1f} µs ({100 * v / total:.1f}%)</title></rect>')
        if w > 70:
            out.append(f'<text x="{x + 4:.1f}" y="15" fill="#fff">{escape(label)} {100 * v / total:.0f}%</text>')
        x += w
    out.append('<text x="0" y="40">share of busy time per lane (hover for figures)</text></svg>')
    return "".join(out)


def _timeline(sim: dict[str, Any], width: int = 1000) -> str:
    events = sim.get("timeline") or []
    if not events:
        return ""
    end = max(e["end_us"] for e in events) or 1.0
    lanes = ["npu", "cpu", "dma"]
    colors = {"npu": NPU_COLOR, "cpu": CPU_COLOR, "dma": DMA_COLOR}
    label_w = 50
    plot_w = width - label_w - 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{len(lanes) * 28 + 24}" role="img">']
    for i, lane in enumerate(lanes):
        y = 4 + i * 28
        out.append(f'<text x="0" y="{y + 15}">{lane.upper()}</text>')
        out.append(f'<rect x="{label_w}" y="{y}" width="{plot_w}" height="22" fill="#eef0f3"/>')
        for e in events:
            if e["lane"] != lane:
                continue
            x = label_w + plot_w * e["start_us"] / end
            w = max(0.6, plot_w * (e["end_us"] - e["start_us"]) / end)
            out.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="22" fill="{colors[lane]}" '
                       f'stroke="#fff" stroke-width="0.3"><title>{escape(str(e["name"]))} ({e["kind"]}): '
                       f'{e["start_us"]:.1f}-{e["end_us"]:.1f} µs</title></rect>')
    out.append(f'<text x="{label_w}" y="{len(lanes) * 28 + 18}">0</text>'
               f'<text x="{width - 10}" y="{len(lanes) * 28 + 18}" text-anchor="end">{_fmt_us(end)}</text></svg>')
    return "".join(out)


def _table(headers: list[str], rows: list[list[Any]], num_cols: set[int] | None = None) -> str:
    num_cols = num_cols or set()
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for r in rows:
        cells = []
        for i, c in enumerate(r):
            cls = ' class="num"' if i in num_cols else ""
            cells.append(f"<td{cls}>{c if isinstance(c, _Raw) else escape(str(c))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class _Raw(str):
    """Already-escaped HTML."""


def _vela_section(sim: dict[str, Any]) -> list[str]:
    """model.tflite and, with --vela, vela's cycles per layer beside our estimate."""
    h: list[str] = []
    tfl = sim.get("tflite")
    if tfl:
        counts: dict[str, int] = {}
        for o in tfl["ops"]:
            counts[o["op"]] = counts.get(o["op"], 0) + 1
        h.append(f"<h2>TFLite export ({len(tfl['ops'])} operators in model.tflite)</h2><p>" +
                 escape(", ".join(f"{k} × {v}" for k, v in sorted(counts.items()))) + "</p>")
        if tfl.get("float_ops"):
            h.append(f"<h3>{len(tfl['float_ops'])} ops stay float (--allow-float-ops), between DEQUANTIZE "
                     "and QUANTIZE</h3>")
            h.append(_table(["node", "op", "why"], [[f["node"], f["op"], f["reason"]] for f in tfl["float_ops"]],
                            set()))
    vela = sim.get("vela")
    if not vela:
        return h
    clock_mhz = float(sim.get("target_summary", {}).get("npu", {}).get("clock_mhz") or 0)
    h.append(f"<h2>vela beside our estimate ({escape(str(vela.get('accelerator')))}, "
             f"{escape(str(vela.get('system_config')))}, {escape(str(vela.get('memory_mode')))})</h2>")
    h.append(_table(["", "ours", "vela"],
                    [["latency", _fmt_us(sim["latency_us"]), _fmt_us(vela["latency_us"])],
                     ["NPU / CPU ops", f"{sim['summary']['npu_ops']} / {sim['summary']['cpu_ops']}",
                      f"{vela['npu_ops']} / {vela['cpu_ops']}"],
                     ["cycles", f"{sim['latency_us'] * clock_mhz:,.0f}" if clock_mhz else "", f"{vela['total_cycles']:,}"]],
                    {1, 2}))
    rows = [[o["node"], o["op_type"], f"{o['latency_us']:.2f}", f"{o['vela_cycles']:,}",
             f"{o['vela_cycles'] / clock_mhz:.2f}" if clock_mhz else ""]
            for o in sim["ops"] if "vela_cycles" in o]
    h.append(_table(["node", "op", "ours µs", "vela cycles", "vela µs"], rows, {2, 3, 4}))
    if vela.get("cpu_reasons"):
        h.append("<p>vela keeps on the CPU:</p><ul>" + "".join(f"<li>{escape(r)}</li>" for r in vela["cpu_reasons"])
                 + "</ul>")
    return h


def render_report(doc: dict[str, Any]) -> str:
    """The HTML page for a compile document (see artifacts.report_document)."""
    sim = doc["simulation"]
    summ = sim["summary"]
    q = doc.get("quantization")
    title = f"{doc['model']['name']} on {sim['target']}"
    cards = [
        (_fmt_us(sim["latency_us"]), "simulated latency (first run)"),
        (f"{summ['npu_ops']} / {summ['cpu_ops']}", "ops on NPU / CPU"),
        (str(summ["transfers"]), "CPU↔NPU transfers"),
        (str(summ["partitions"]), "partitions"),
        (f"{doc['optimize']['nodes_before']} → {doc['optimize']['nodes_after']}", "nodes before → after optimizing"),
        (doc["precision"], "NPU precision"),
    ]
    if q and q.get("outputs"):
        worst = min(o["sqnr_db"] for o in q["outputs"].values())
        cards.append((f"{worst:.1f} dB", "output SQNR vs FP32"))
    if doc.get("steady_state_us"):
        cards.append((_fmt_us(doc["steady_state_us"]), "steady-state latency"))
    h = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>",
         f"<style>{CSS}</style></head><body><main>",
         f"<h1>{escape(title)}</h1><div class='sub'>NPU Studio {escape(doc['tool_version'])} · "
         f"target: {escape(sim['target_summary']['description'])}</div>",
         "<div class='cards'>" + "".join(f"<div class='card'><b>{escape(v)}</b><span>{escape(k)}</span></div>"
                                         for v, k in cards) + "</div>"]
    # Fallbacks have their own table below; the warning list keeps everything else.
    warns = [d for d in doc.get("diagnostics", []) if d["severity"] in ("warning", "error")
             and d.get("code") != "npu-fallback"]
    if warns:
        h.append("<h2>Warnings</h2><ul>" + "".join(
            f"<li class='{escape(d['severity'])}'>{escape(d['message'])}"
            f"{' (' + escape(d['node']) + ')' if d.get('node') else ''}</li>" for d in warns[:30]) + "</ul>")

    h.append("<h2>Stage breakdown</h2>")
    h.append(_table(["stage", "time", "share", "notes"],
                    [[s["stage"], _fmt_us(s["us"]), f"{100 * s['share']:.1f}%", s.get("note", "")]
                     for s in sim.get("stages", [])], {1, 2}))
    h.append(_share_bar([("NPU", summ["npu_us"], NPU_COLOR), ("CPU fallback", summ["cpu_us"], CPU_COLOR),
                         ("transfers", summ["transfer_us"], DMA_COLOR)]))
    h.append("<h2>Timeline</h2><div class='legend'>" + "".join(
        f"<span style='background:{c}'></span>{n}" for n, c in (("NPU", NPU_COLOR), ("CPU", CPU_COLOR),
                                                                  ("DMA", DMA_COLOR))) + "</div>")
    h.append(_timeline(sim))

    ops = sorted(sim["ops"], key=lambda o: -o["latency_us"])
    h.append(f"<h2>Per-op latency (top {min(30, len(ops))} of {len(ops)})</h2>")
    h.append(_bar_chart([(f"{o['node']} ({o['op_type']})", o["latency_us"],
                          NPU_COLOR if o["device"] == "npu" else CPU_COLOR) for o in ops[:30]], "µs"))
    rows = [[o["node"], o["op_type"], _Raw(f"<span class='{o['device']}'>{o['device'].upper()}</span>"),
             f"{o['latency_us']:.2f}", o["bound"], f"{o.get('macs', 0):,}"] for o in ops]
    h.append("<details><summary>all ops</summary>" +
             _table(["node", "op", "device", "latency µs", "bound", "MACs"], rows, {3, 5}) + "</details>")

    h.extend(_vela_section(sim))
    fallbacks = [o for o in sim["ops"] if o["device"] == "cpu"]
    h.append(f"<h2>CPU fallbacks ({len(fallbacks)})</h2>")
    if fallbacks:
        h.append(_table(["node", "op", "reason", "latency µs"],
                        [[o["node"], o["op_type"], o["fallback_reason"], f"{o['latency_us']:.2f}"] for o in fallbacks],
                        {3}))
    else:
        h.append("<p>Every op runs on the NPU.</p>")
    if sim.get("suggestions"):
        h.append("<h3>Suggested fixes</h3><ul>" + "".join(
            f"<li>{escape(s['message'])} (saves about {_fmt_us(s['saving_us'])})</li>" for s in sim["suggestions"])
            + "</ul>")

    fused = doc.get("fused", [])
    h.append(f"<h2>Fused groups ({len(fused)})</h2>")
    if fused:
        h.append(_table(["node", "op", "from original nodes"],
                        [[f["node"], f["op_type"], ", ".join(f["from"])] for f in fused]))
    else:
        h.append("<p>No fusion applied.</p>")

    if q:
        layers = sorted(q.get("layers", []), key=lambda r: r["sqnr_db"])
        h.append(f"<h2>Quantization error per layer ({q['method']}, {q['dtype']}, "
                 f"{'per-channel' if q['per_channel'] else 'per-tensor'}, {q['samples']} samples)</h2>")
        h.append(_bar_chart([(f"{r['node']} ({r['op_type']})", max(r["sqnr_db"], 0.0),
                              CPU_COLOR if r["sqnr_db"] < 20 else NPU_COLOR) for r in layers[:30]], "dB"))
        h.append(_table(["node", "op", "dtype", "SQNR dB", "cosine", "max abs err", "isolated SQNR dB"],
                        [[r["node"], r["op_type"], r["dtype"], f"{r['sqnr_db']:.2f}", f"{r['cosine']:.5f}",
                          f"{r['max_abs_err']:.4g}", f"{r.get('isolated', {}).get('sqnr_db', float('nan')):.2f}"]
                         for r in layers], {3, 4, 5, 6}))
    else:
        h.append("<h2>Quantization</h2><p>Not quantized (float target or nothing to quantize).</p>")
    infos = [d for d in doc.get("diagnostics", []) if d["severity"] == "info"]
    if infos:
        h.append("<details><summary>notes</summary><ul>" + "".join(
            f"<li>{escape(d['message'])}</li>" for d in infos[:200]) + "</ul></details>")
    h.append("</main></body></html>\n")
    return "".join(h)
