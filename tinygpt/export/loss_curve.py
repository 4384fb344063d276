"""The loss curve of a run as an SVG image for its model card, drawn with the standard library's ElementTree (so
exporting needs no plotting library): training loss as a line, validation loss as a line with points."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from ..records import StepMetrics

WIDTH, HEIGHT, MARGIN = 640, 360, 48
COLOURS = {"train": "#1f77b4", "validation": "#d62728"}


def ticks(low: float, high: float, count: int = 5) -> list[float]:
    """``count`` evenly spaced values from ``low`` to ``high``.

    >>> ticks(0, 1500, 4)
    [0.0, 500.0, 1000.0, 1500.0]
    """
    return [low + (high - low) * i / (count - 1) for i in range(count)]


def loss_curve_svg(rows: Sequence[StepMetrics]) -> str:
    """The SVG text: x is the step, y the loss (both linear); axes with ticks, a legend.

    >>> svg = loss_curve_svg([StepMetrics(0, 8.3, 8.3, 0, 0, 0, 0, 0, 0), StepMetrics(10, 6.0, 6.2, 0, 0, 0, 0, 0, 0)])
    >>> svg.count("<polyline"), svg.count("<circle")  # the axes and two curves; the validation points
    (3, 2)
    """
    series = {"train": [(r.step, r.train_loss) for r in rows],
              "validation": [(r.step, r.val_loss) for r in rows if r.val_loss is not None]}
    xs = [s for points in series.values() for s, _ in points] or [0]
    ys = [v for points in series.values() for _, v in points] or [0]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = min(ys), max(max(ys), min(ys) + 0.1)

    def at(step: float, loss: float) -> tuple[float, float]:
        return (MARGIN + (step - x0) / (x1 - x0) * (WIDTH - 2 * MARGIN),
                HEIGHT - MARGIN - (loss - y0) / (y1 - y0) * (HEIGHT - 2 * MARGIN))

    svg = ET.Element("svg", xmlns="http://www.w3.org/2000/svg", width=str(WIDTH), height=str(HEIGHT),
                     viewBox=f"0 0 {WIDTH} {HEIGHT}", attrib={"font-family": "sans-serif", "font-size": "12"})
    ET.SubElement(svg, "rect", width=str(WIDTH), height=str(HEIGHT), fill="white")
    axes = f"{MARGIN},{MARGIN} {MARGIN},{HEIGHT - MARGIN} {WIDTH - MARGIN},{HEIGHT - MARGIN}"
    ET.SubElement(svg, "polyline", points=axes, fill="none", stroke="#444")
    for step in ticks(x0, x1):
        x, y = at(step, y0)
        ET.SubElement(svg, "text", x=f"{x:.1f}", y=f"{y + 16:.1f}", attrib={"text-anchor": "middle"}).text = f"{step:,.0f}"
    for loss in ticks(y0, y1):
        x, y = at(x0, loss)
        ET.SubElement(svg, "text", x=f"{x - 6:.1f}", y=f"{y + 4:.1f}", attrib={"text-anchor": "end"}).text = f"{loss:.2f}"
    ET.SubElement(svg, "text", x=str(WIDTH // 2), y=str(HEIGHT - 8), attrib={"text-anchor": "middle"}).text = "step"
    ET.SubElement(svg, "text", x="12", y=str(HEIGHT // 2), transform=f"rotate(-90 12 {HEIGHT // 2})",
                  attrib={"text-anchor": "middle"}).text = "loss (nats per token)"
    for i, (name, points) in enumerate(series.items()):
        colour = COLOURS[name]
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y in (at(s, v) for s, v in points))
        ET.SubElement(svg, "polyline", points=line, fill="none", stroke=colour, attrib={"stroke-width": "1.5"})
        if name == "validation":
            for s, v in points:
                x, y = at(s, v)
                ET.SubElement(svg, "circle", cx=f"{x:.1f}", cy=f"{y:.1f}", r="3", fill=colour)
        legend_y = MARGIN + 16 * i
        ET.SubElement(svg, "rect", x=str(WIDTH - MARGIN - 110), y=str(legend_y - 9), width="10", height="10", fill=colour)
        ET.SubElement(svg, "text", x=str(WIDTH - MARGIN - 95), y=str(legend_y)).text = f"{name} loss"
    return ET.tostring(svg, encoding="unicode")
