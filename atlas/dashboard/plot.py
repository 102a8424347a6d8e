"""A stacked bar plot as inline SVG, drawn on the server: no chart library, no script.

Colours come from CSS classes (`series-0` …) so the page's stylesheet sets them and the CSP
needs no inline style. Each bar segment has a <title>, which browsers show on hover and screen
readers read; the page also shows the same figures as a table.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup, escape

WIDTH, HEIGHT = 720, 260
LEFT, BOTTOM, TOP = 56, 28, 12
SERIES_CLASSES = 8


@dataclass(frozen=True)
class Bars:
    labels: list[str]  # one per bar (a day)
    series: dict[str, list[float]]  # name -> one value per bar
    unit: str = "tokens"


def _short(value: float) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}"


def stacked_bars(bars: Bars, title: str) -> Markup:
    count = max(len(bars.labels), 1)
    totals = [sum(values[i] for values in bars.series.values()) for i in range(len(bars.labels))]
    top = max(totals, default=0) or 1
    inner_w, inner_h = WIDTH - LEFT - 8, HEIGHT - BOTTOM - TOP
    step = inner_w / count
    width = max(step * 0.7, 1)
    parts = [
        f'<svg class="plot" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    for fraction in (0, 0.5, 1):  # a light grid with the scale
        y = TOP + inner_h * (1 - fraction)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - 8}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(
            f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{_short(top * fraction)}</text>"
        )
    for i, label in enumerate(bars.labels):
        x = LEFT + i * step + (step - width) / 2
        base = TOP + inner_h
        for k, (name, values) in enumerate(bars.series.items()):
            value = values[i]
            if value <= 0:
                continue
            height = inner_h * value / top
            base -= height
            parts.append(
                f'<rect class="series-{k % SERIES_CLASSES}" x="{x:.1f}" y="{base:.1f}" '
                f'width="{width:.1f}" height="{height:.1f}"><title>{escape(label)} '
                f"{escape(name)}: {value:,.0f} {escape(bars.unit)}</title></rect>"
            )
        if count <= 16 or i % max(count // 8, 1) == 0:  # labels that fit
            parts.append(
                f'<text class="axis" x="{x + width / 2:.1f}" y="{HEIGHT - 8}" '
                f'text-anchor="middle">{escape(label[5:])}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))
