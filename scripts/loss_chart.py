"""Draw loss curves from runs' metrics CSVs into a PNG (the charts of docs/REPRODUCTION.md).

Each ``--run LABEL=CSV`` is a run's metrics CSV (the dashboard's export or ``tinygpt train``'s
``metrics.csv``): its train batch losses as a thin line; at each evaluation its validation loss as a
thick line with dots and its train-split estimate (measured like validation: no dropout, the
same 20 batches) as a dashed line with squares. The two sets of train figures differ by the
dropout, so they are not joined into one line. Each ``--points LABEL=CSV`` is a table of published figures (``step,train_loss,
val_loss``): drawn as hollow markers (squares for train, circles for validation), no line.

    python scripts/loss_chart.py docs/reproduction/holmes-1500.png --title "1,500 steps" \\
        --run "CPU fp32=docs/runs/cpu-holmes-1500-fp32.csv" --points "series CPU=docs/runs/series-cpu-fp32.csv"

The chart is an SVG (``scripts/loss_chart.svg.j2``) rendered to PNG by chromium through
playwright (both already used by the browser tests); ``--svg`` keeps the SVG instead.
"""

from __future__ import annotations

import argparse
import csv
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

HERE = Path(__file__).resolve().parent
COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2"]
WIDTH, HEIGHT = 900, 540
MARGIN = {"left": 64, "right": 24, "top": 48, "bottom": 116}


@dataclass
class Series:
    label: str
    color: str
    train: list[tuple[float, float]] = field(default_factory=list)  # (step, loss): batch losses
    train_eval: list[tuple[float, float]] = field(default_factory=list)  # the estimates on evaluation rows
    val: list[tuple[float, float]] = field(default_factory=list)
    points_only: bool = False


def read_series(spec: str, color: str, *, points_only: bool) -> Series:
    """``LABEL=path.csv`` -> the CSV's train and validation losses by step."""
    label, sep, path = spec.rpartition("=")
    if not sep or not label:
        raise SystemExit(f"error: {spec!r} is not LABEL=CSV")
    series = Series(label, color, points_only=points_only)
    try:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                step = float(row["step"])
                if row.get("train_loss"):
                    on_eval_row = bool(row.get("val_loss")) and not points_only
                    (series.train_eval if on_eval_row else series.train).append((step, float(row["train_loss"])))
                if row.get("val_loss"):
                    series.val.append((step, float(row["val_loss"])))
    except OSError as e:
        raise SystemExit(f"error: cannot read {path}: {e.strerror}") from None
    except (KeyError, ValueError) as e:
        raise SystemExit(f"error: {path} is not a metrics CSV with step, train_loss, val_loss columns ({e})") from None
    if not series.train and not series.val:
        raise SystemExit(f"error: {path} has no train_loss or val_loss values")
    return series


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round tick values covering [lo, hi]: ``nice_ticks(0, 1500) == [0, 250, 500, ..., 1500]``."""
    raw = (hi - lo) / max(count - 1, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1.5)) if first + i * step <= hi + 1e-9]


def layout(series: list[Series], *, y_min: float | None, y_max: float | None, x_max: float | None) -> dict:
    """Pixel coordinates of every line, marker, tick and legend entry."""
    values = [p for s in series for p in s.train + s.train_eval + s.val]
    xs, ys = [p[0] for p in values], [p[1] for p in values]
    x0, x1 = 0.0, x_max or max(xs)
    y0, y1 = y_min if y_min is not None else math.floor(min(ys)), y_max if y_max is not None else math.ceil(max(ys))
    plot_w = WIDTH - MARGIN["left"] - MARGIN["right"]
    plot_h = HEIGHT - MARGIN["top"] - MARGIN["bottom"]

    def px(step: float, loss: float) -> tuple[float, float]:
        loss = min(max(loss, y0), y1)  # clip: a chart zoomed on the end keeps the start as an edge
        return (round(MARGIN["left"] + (step - x0) / (x1 - x0) * plot_w, 1),
                round(MARGIN["top"] + (y1 - loss) / (y1 - y0) * plot_h, 1))

    def inside(p: tuple[float, float]) -> bool:
        return x0 <= p[0] <= x1

    drawn = []
    for s in series:
        drawn.append({
            "label": s.label,
            "color": s.color,
            "points_only": s.points_only,
            "train": [px(*p) for p in s.train if inside(p)],
            "train_eval": [px(*p) for p in s.train_eval if inside(p)],
            "val": [px(*p) for p in s.val if inside(p)],
        })
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "plot": {"x": MARGIN["left"], "y": MARGIN["top"], "w": plot_w, "h": plot_h},
        "x_ticks": [(px(t, y0)[0], f"{t:,.0f}") for t in nice_ticks(x0, x1)],
        "y_ticks": [(px(x0, t)[1], f"{t:g}") for t in nice_ticks(y0, y1) if y0 <= t <= y1],
        "series": drawn,
    }


def render_svg(chart: dict, title: str) -> str:
    env = Environment(loader=FileSystemLoader(HERE), autoescape=select_autoescape(["j2"], default=True))
    return env.get_template("loss_chart.svg.j2").render(chart=chart, title=title)


def write_png(svg: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT}, device_scale_factor=2)
        page.set_content(svg)
        page.locator("svg").screenshot(path=str(out))
        browser.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the PNG to write (or SVG with --svg)")
    ap.add_argument("--title", default="loss")
    ap.add_argument("--run", action="append", default=[], metavar="LABEL=CSV", help="a run's metrics CSV (lines)")
    ap.add_argument("--points", action="append", default=[], metavar="LABEL=CSV", help="published figures (markers)")
    ap.add_argument("--y-min", type=float)
    ap.add_argument("--y-max", type=float)
    ap.add_argument("--x-max", type=float, help="last step shown")
    ap.add_argument("--svg", action="store_true", help="write the SVG, not a PNG")
    args = ap.parse_args(argv)
    if not args.run and not args.points:
        ap.error("give at least one --run or --points")
    specs = [(s, False) for s in args.run] + [(s, True) for s in args.points]
    series = [read_series(s, COLORS[i % len(COLORS)], points_only=po) for i, (s, po) in enumerate(specs)]
    svg = render_svg(layout(series, y_min=args.y_min, y_max=args.y_max, x_max=args.x_max), args.title)
    if args.svg:
        args.out.write_text(svg)
    else:
        write_png(svg, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
