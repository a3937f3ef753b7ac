"""Text table, JSON and a hand-written SVG chart of an estimate (stdlib only)."""
from __future__ import annotations

from html import escape

from .estimate import CATEGORIES, Result

GiB = 1024 ** 3
COLORS = {
    "params": "#4e79a7", "grads": "#f28e2b", "master": "#e15759", "optimizer": "#76b7b2",
    "activations": "#59a14f", "temporaries": "#edc948", "runtime": "#b07aa1", "generation": "#9c755f",
}


def _g(b: float) -> str:
    return f"{b / GiB:6.1f}"


def exit_status(r) -> int:
    """estimate's exit status: 4 when a setting fails whatever memory it has, else 3 out of memory,
    else 0 (fits or tight)."""
    if r.errors:
        return 4
    return {"fits": 0, "tight": 0, "oom": 3}[r.verdict]


def cache_handed_back(card: float, needed: float) -> bool:
    """Whether the card's figure and the verdict's differ enough to show both (0.05 GiB: what
    one decimal of GiB shows)."""
    return card - needed >= 0.05 * GiB


def render_text(r: Result) -> str:
    used = [c for c in CATEGORIES if any(p.by_category.get(c, 0) for p in r.phases)]
    lines = [(f"GPU {r.gpu_name} ({r.gpu_bytes / GiB:.1f} GiB), {r.params:,} parameters "
              f"({r.trainable_params:,} trainable); GiB per GPU by phase:")]
    head = f"{'phase':<10}" + "".join(f"{c[:11]:>12}" for c in used) + f"{'total':>10}"
    lines += [head, "-" * len(head)]
    for p in r.phases:
        lines.append(f"{p.name:<10}" + "".join(f"{_g(p.by_category.get(c, 0)):>12}" for c in used)
                     + f"{_g(p.total_bytes):>10}")
    lines.append(f"peak ({r.peak_phase}): allocated {r.gpu_allocated_bytes / GiB:.1f} GiB, reserved "
                 f"{r.gpu_reserved_bytes / GiB:.1f} GiB; with CUDA context and other processes the card holds "
                 f"{r.gpu_card_bytes / GiB:.1f} GiB of {r.gpu_bytes / GiB:.1f} GiB"
                 + (f", {r.gpu_needed_bytes / GiB:.1f} GiB once PyTorch hands back what it can of its cache"
                    if cache_handed_back(r.gpu_card_bytes, r.gpu_needed_bytes) else "")
                 + f" -> {r.verdict.upper()}")
    host = ", ".join(f"{k.replace('_', ' ')} {v / GiB:.1f}" for k, v in r.host.items() if v)
    lines.append(f"host RAM per node: peak {r.host_peak_bytes / GiB:.1f} GiB ({host})"
                 + (f" -> {r.host_verdict.upper()}" if r.host_verdict else ""))
    for e in r.errors:
        lines.append(f"error: will not run: {e}")
    for n in r.notes:
        lines.append(f"note: {n}")
    if r.remedies:
        lines.append("remedies (cheapest first):")
        for m in r.remedies:
            cache = cache_handed_back(m["gpu_card_bytes"], m["gpu_needed_bytes"])
            lines.append(f"  - {m['change']}: card {m['gpu_card_bytes'] / GiB:.1f} GiB"
                         + (f", {m['gpu_needed_bytes'] / GiB:.1f} once the cache is handed back" if cache else "")
                         + f" -> {m['verdict']}")
    return "\n".join(lines)


def render_svg(result: Result, width: int = 640, height: int = 360) -> str:
    """Stacked bars (one per phase) by category, with the GPU capacity as a dashed line."""
    phases = result.phases
    top = max([result.gpu_bytes, result.gpu_peak_bytes, result.gpu_card_bytes] + [p.total_bytes for p in phases]) * 1.08
    ml, mr, mt, mb = 60, 150, 30, 40
    pw, ph = width - ml - mr, height - mt - mb
    bw = pw / (len(phases) * 1.6)

    def y(b):
        return mt + ph - ph * b / top

    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">'),
           f'<title>{escape(result.gpu_name)}: {escape(result.verdict)}</title>',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    step = max(1, int(top / GiB / 6 / 10 + 1) * 10) * GiB
    tick = 0
    while tick <= top:
        out.append(f'<line x1="{ml}" y1="{y(tick):.1f}" x2="{ml + pw}" y2="{y(tick):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{ml - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick / GiB:.0f}</text>')
        tick += step
    out.append(f'<text x="14" y="{mt + ph / 2:.1f}" transform="rotate(-90 14 {mt + ph / 2:.1f})" '
               f'text-anchor="middle">GiB per GPU</text>')
    for i, p in enumerate(phases):
        x = ml + (i * 1.6 + 0.3) * bw
        acc = 0.0
        for c in CATEGORIES:
            v = p.by_category.get(c, 0)
            if v <= 0:
                continue
            out.append(f'<rect x="{x:.1f}" y="{y(acc + v):.1f}" width="{bw:.1f}" height="{y(acc) - y(acc + v):.1f}" '
                       f'fill="{COLORS[c]}"><title>{c}: {v / GiB:.2f} GiB</title></rect>')
            acc += v
        out.append(f'<text x="{x + bw / 2:.1f}" y="{mt + ph + 16}" text-anchor="middle">{escape(p.name)}</text>')
        out.append(f'<text x="{x + bw / 2:.1f}" y="{y(acc) - 4:.1f}" text-anchor="middle">{acc / GiB:.1f}</text>')
    # the bars are allocated memory; the verdict is about what the card holds (allocator reserve too)
    card = y(result.gpu_card_bytes)
    out.append(f'<line x1="{ml}" y1="{card:.1f}" x2="{ml + pw}" y2="{card:.1f}" stroke="#555" stroke-dasharray="2 3"/>')
    out.append(f'<text x="{ml + 4}" y="{card - 4:.1f}" fill="#555">reserved + context '
               f'{result.gpu_card_bytes / GiB:.1f} GiB</text>')
    cap = y(result.gpu_bytes)
    out.append(f'<line x1="{ml}" y1="{cap:.1f}" x2="{ml + pw}" y2="{cap:.1f}" stroke="#c00" stroke-dasharray="6 4"/>')
    out.append(f'<text x="{ml + pw - 4}" y="{cap - 4:.1f}" text-anchor="end" fill="#c00">'
               f'{escape(result.gpu_name)} {result.gpu_bytes / GiB:.0f} GiB - {escape(result.verdict)}</text>')
    ly = mt
    for c in CATEGORIES:
        if not any(p.by_category.get(c, 0) for p in phases):
            continue
        out.append(f'<rect x="{ml + pw + 16}" y="{ly}" width="12" height="12" fill="{COLORS[c]}"/>')
        out.append(f'<text x="{ml + pw + 34}" y="{ly + 10}">{c}</text>')
        ly += 18
    out.append("</svg>")
    return "\n".join(out) + "\n"
