"""The console's SVG charts escape their labels and stay within their frame."""

from __future__ import annotations

from settlekit.console import charts


def test_bar_labels_are_escaped_and_values_bounded() -> None:
    svg = str(charts.bars([("<script>x</script>", 150.0), ('"><img onerror=1>', -5.0)], maximum=100, unit="%"))
    assert "<script>" not in svg and "<img" not in svg and "&lt;script&gt;" in svg
    assert 'width="-' not in svg  # a negative value draws no bar
    assert str(charts.bars([])).startswith("<p")


def test_line_needs_two_samples() -> None:
    assert "<svg" not in str(charts.line([1.0]))
    assert "<polyline" in str(charts.line([0.0, 2.0, 1.0]))
