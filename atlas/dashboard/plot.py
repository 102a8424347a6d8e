"""A stacked bar plot as inline SVG, drawn on the server: no chart library, no script.

Colours come from CSS classes (`series-0` …) so the page's stylesheet sets them and the CSP
needs no inline style. Each bar segment has a <title>, which browsers show on hover and screen
readers read; the page also shows the same figures as a table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from markupsafe import Markup, escape

SERIES_CLASSES = 8
FONT = 11  # the axis labels' font size in SVG units (app.css: .plot .axis)
CHAR = 0.62 * FONT  # a label character's width, about, in a sans-serif font


@dataclass(frozen=True)
class Frame:
    """One drawing of the plot. The SVG scales to the page's width, and its labels with it:
    a 720-unit drawing on a 370 px phone would draw 11-unit labels 5.6 px tall, so phones get
    a narrow drawing (app.css shows one of the two by the window's width)."""

    css: str
    width: int
    height: int
    labels: int  # x-axis labels at most
    bottom: int = 28
    top: int = 12
    right: int = 8


WIDE = Frame("wide", 720, 260, labels=16)
NARROW = Frame("narrow", 360, 220, labels=6)


@dataclass(frozen=True)
class Bars:
    labels: list[str]  # one per bar (a day)
    series: dict[str, list[float]]  # name -> one value per bar
    unit: str = "tokens"


def _short(value: float) -> str:
    """An axis value in a few characters, never in exponent notation (costs are small)."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:.3g}{suffix}"
    if 0 < value < 1:
        digits = max(2, 1 - math.floor(math.log10(value)))  # two significant at least
        return f"{value:.{digits}f}".rstrip("0")
    return f"{value:.3g}"


def stacked_bars(bars: Bars, title: str) -> Markup:
    """The plot drawn twice, for wide and narrow windows; the page shows one."""
    return Markup("".join(_svg(bars, title, frame) for frame in (WIDE, NARROW)))


def _svg(bars: Bars, title: str, frame: Frame) -> str:
    count = max(len(bars.labels), 1)
    totals = [sum(values[i] for values in bars.series.values()) for i in range(len(bars.labels))]
    top = max(totals, default=0) or 1
    scale = [
        (frame.top + (frame.height - frame.bottom - frame.top) * (1 - f), _short(top * f))
        for f in (0, 0.5, 1)
    ]
    left = 10 + round(CHAR * max(len(text) for _, text in scale))  # the longest scale label fits
    inner_w = frame.width - left - frame.right
    inner_h = frame.height - frame.bottom - frame.top
    step = inner_w / count
    width = max(step * 0.7, 1)
    parts = [
        f'<svg class="plot {frame.css}" viewBox="0 0 {frame.width} {frame.height}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    for y, text in scale:  # a light grid with the scale
        parts.append(
            f'<line class="grid" x1="{left}" x2="{frame.width - frame.right}" '
            f'y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        parts.append(
            f'<text class="axis" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{text}</text>'
        )
    every = max(-(-count // frame.labels), 1)  # label every n-th day: at most frame.labels
    for i, label in enumerate(bars.labels):
        x = left + i * step + (step - width) / 2
        base = frame.top + inner_h
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
        if i % every == 0:
            shown = label[5:]
            half = CHAR * len(shown) / 2  # kept inside the drawing at either end
            middle = min(max(x + width / 2, half + 2), frame.width - half - 2)
            parts.append(
                f'<text class="axis" x="{middle:.1f}" y="{frame.height - 8}" '
                f'text-anchor="middle">{escape(shown)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)
