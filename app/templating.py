"""The Jinja2 templates and how a page renders them.

Every link a page holds is root-relative: ``{{ root }}/runs/1``, where ``root`` is the path prefix the
dashboard is served under (``TINYGPT_ROOT_PATH``, e.g. ``/tinygpt`` behind a reverse proxy; empty by
default). No link carries a scheme or host, so a page served over HTTPS by a proxy never points at
``http://`` assets, whatever the proxy forwards.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from markdown_it import MarkdownIt
from markupsafe import Markup

from tinygpt import __version__
from tinygpt.options import option_value_text
from tinygpt.records import duration_text

from .models.runs import FINISHED
from .static_files import asset_version

#: The templates folder: the repository's top-level templates/, installed as the package app.templates
TEMPLATES = Path(str(resources.files("app.templates")))


def root_path(request: Request) -> str:
    """The prefix the app is served under ('' or e.g. '/tinygpt')."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def app_url(request: Request, path: str) -> str:
    """A root-relative link to ``path`` (which starts with '/') on this dashboard."""
    return root_path(request) + path


def page_context(request: Request) -> dict[str, Any]:
    """What every page template sees: the root path, and whether the visitor logged in (set by the guard)."""
    return {"root": root_path(request), "signed_in": getattr(request.state, "signed_in", False)}


def ratio_text(ratio: float) -> str:
    """A ratio as people read it: two decimals near 1, three significant digits far from it (never "0.00x").

    >>> [ratio_text(r) for r in (1.0, 0.5, 371.24, 0.0026937, 12.345)]
    ['1.00x', '0.50x', '371x', '0.00269x', '12.35x']
    """
    return f"{ratio:.2f}x" if 0.1 <= ratio < 100 else f"{ratio:.3g}x"


def figure_text(value: float, figure: str) -> str:
    """Losses (and bits per byte) to 4 decimals; counts, seconds, tokens/s and MiB whole, with thousands."""
    return f"{value:.4f}" if "loss" in figure or "bpb" in figure else f"{value:,.0f}"


def spread_text(spread: dict | None, figure: str) -> str:
    """A group's figure: mean +/- standard deviation (n).

    >>> spread_text({"mean": 3.77, "std": 0.01, "n": 3}, "best_val_loss")
    '3.7700 ± 0.0100 (n=3)'
    >>> spread_text({"mean": 2300.4, "std": 12.2, "n": 2}, "tokens_per_sec"), spread_text(None, "peak_mem_mib")
    ('2,300 ± 12 (n=2)', '–')
    """
    if spread is None:
        return "–"
    std = "" if spread["std"] is None else f" ± {figure_text(spread['std'], figure)}"
    return f"{figure_text(spread['mean'], figure)}{std} (n={spread['n']})"


def difference_text(d: dict | None, figure: str) -> str:
    """Two groups' difference with its 95 % interval, and whether the seeds alone could make it.

    >>> difference_text({"difference": -0.01, "half_width": 0.05, "within_noise": True}, "best_val_loss")
    '-0.0100 ± 0.0500 (within seed noise)'
    """
    if d is None:
        return "–"
    sign = "+" if d["difference"] >= 0 else "-"
    shown = f"{sign}{figure_text(abs(d['difference']), figure)}"
    if d["half_width"] is None:
        return f"{shown} (too few runs to tell)"
    noise = "within seed noise" if d["within_noise"] else "larger than seed noise"
    return f"{shown} ± {figure_text(d['half_width'], figure)} ({noise})"


#: Notes in CommonMark with tables; raw HTML is shown as text and links with unsafe schemes (javascript:,
#: vbscript:, file:) are not made links: nothing a note holds runs in the page.
MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")


def markdown_html(text: str | None) -> Markup:
    """A note as safe HTML.

    >>> str(markdown_html("**bold** <script>alert(1)</script>"))
    '<p><strong>bold</strong> &lt;script&gt;alert(1)&lt;/script&gt;</p>\\n'
    """
    return Markup(MARKDOWN.render(text or ""))


def excerpt_text(text: str | None, length: int = 100) -> str:
    """The first line of a note with words, for a list (Markdown marks left as typed).

    >>> excerpt_text("\\n# Seed noise\\nthree seeds")
    '# Seed noise'
    """
    line = next((line.strip() for line in (text or "").splitlines() if line.strip()), "")
    return line if len(line) <= length else line[: length - 1] + "…"


templates = Jinja2Templates(directory=TEMPLATES, context_processors=[page_context])
templates.env.globals["fmt"] = lambda v: "–" if v is None else f"{v:.4f}"
templates.env.filters["duration"] = duration_text  # seconds as "1 h 51 min" (the library's words)
templates.env.filters["ratio"] = ratio_text
templates.env.filters["markdown"] = markdown_html
templates.env.filters["excerpt"] = excerpt_text
templates.env.filters["spread"] = spread_text
templates.env.filters["difference"] = difference_text
templates.env.filters["option_value"] = option_value_text  # the library's words for an option's value
templates.env.globals["version"] = __version__  # every page's footer (the installed package's metadata)
templates.env.globals["finished"] = [s.value for s in FINISHED]
templates.env.globals["asset_version"] = asset_version()  # our CSS and JavaScript, kept by browsers until it changes


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context, status_code=status_code)
