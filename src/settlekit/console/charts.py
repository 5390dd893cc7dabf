"""Small SVG charts rendered on the server (no script): horizontal bars and a line. Labels are escaped here, as
the result is inserted into the page as markup; the look comes from the console's stylesheet (classes only, no
style attributes, so the Content-Security-Policy needs no 'unsafe-inline')."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

BAR_HEIGHT = 18
WIDTH = 320
LABEL_WIDTH = 120
MAX_BARS = 20
MAX_LABEL = 18


def _label(text: str) -> str:
    return text if len(text) <= MAX_LABEL else f"{text[:MAX_LABEL - 1]}…"


def bars(items: Sequence[tuple[str, float]], *, maximum: float | None = None, unit: str = "") -> Markup:
    """One bar per (label, value), the longest at `maximum` (default: the largest value)."""
    shown = list(items)[:MAX_BARS]
    if not shown:
        return Markup('<p class="muted">nothing to chart</p>')
    top = maximum if maximum is not None else max((v for _, v in shown), default=0.0)
    top = top if top > 0 else 1.0
    span = WIDTH - LABEL_WIDTH - 60
    height = BAR_HEIGHT * len(shown) + 4
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" '
             f'aria-label="chart" xmlns="http://www.w3.org/2000/svg">']
    for i, (label, value) in enumerate(shown):
        y = i * BAR_HEIGHT + 2
        length = max(0.0, min(1.0, value / top)) * span
        parts.append(f'<text class="chart-label" x="0" y="{y + 13}">{escape(_label(label))}</text>'
                     f'<title>{escape(label)}</title>'
                     f'<rect class="chart-bar" x="{LABEL_WIDTH}" y="{y + 2}" width="{length:.1f}" '
                     f'height="{BAR_HEIGHT - 6}"/>'
                     f'<text class="chart-value" x="{LABEL_WIDTH + length + 4:.1f}" y="{y + 13}">'
                     f'{value:,.1f}{escape(unit)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def line(values: Sequence[float], *, height: int = 60, unit: str = "/s", label: str = "appends per second"
         ) -> Markup:
    """A line through `values` (oldest first), scaled to the largest."""
    if len(values) < 2:
        return Markup('<p class="muted">collecting samples (the panel refreshes by itself)</p>')
    top = max(values) or 1.0
    step = WIDTH / (len(values) - 1)
    points = " ".join(f"{i * step:.1f},{height - 2 - (v / top) * (height - 4):.1f}" for i, v in enumerate(values))
    return Markup(f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(label)}" '
                  f'xmlns="http://www.w3.org/2000/svg"><polyline class="chart-line" points="{points}"/>'
                  f'<text class="chart-value" x="2" y="12">max {top:,.0f}{escape(unit)}</text></svg>')
