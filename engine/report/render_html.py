"""A :class:`~engine.report.model.Report` as ONE self-contained HTML file.

Offline by construction: Plotly's JavaScript is embedded once (``plotly.offline.get_plotlyjs``), every
figure's data sits in the page as JSON, the styles are inline, fonts are the reader's own (no web
fonts), no ``src``/``href`` points outside the file. Without JavaScript the page still reads: every
figure is followed by the table of the numbers it draws, and a notice says the figures need JavaScript.
Optional static images (``images=True``, kaleido + Chromium) are embedded as PNG inside ``<noscript>``.
"""

from __future__ import annotations

import base64
import html
import json
import re

from engine.report.model import Report, Section, Table

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0;color:#212529;
background:#fff;line-height:1.45}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:1.7em;margin-bottom:.2em}h2{border-bottom:2px solid #dee2e6;padding-bottom:.2em;margin-top:1.8em}
.sub{color:#495057;margin-top:0}
nav ol{columns:2;padding-left:1.2em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.92em}
caption{text-align:left;font-weight:600;padding:.3em 0}
th,td{border-bottom:1px solid #dee2e6;padding:.25em .7em;text-align:left;vertical-align:top}
th{background:#f1f3f5}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.foot{font-size:.85em;color:#495057;margin-top:-.8em;margin-bottom:1.2em}
.warn{background:#fff3bf;border-left:4px solid #f08c00;padding:.4em .8em;margin:.4em 0}
.methods{background:#f8f9fa;border-left:4px solid #adb5bd;padding:.5em .9em;margin:1em 0}
.refs{font-size:.88em;color:#495057}
pre{background:#f1f3f5;padding:.7em;overflow-x:auto;white-space:pre-wrap}
.plot{width:100%;min-height:200px}
figure{margin:1em 0}
footer{color:#868e96;font-size:.85em;margin-top:3em;border-top:1px solid #dee2e6;padding-top:.6em}
"""

DRAW = """
(function(){
  var figs = document.querySelectorAll('div.plot[data-figure]');
  for (var i = 0; i < figs.length; i++) {
    var el = figs[i];
    var spec = JSON.parse(document.getElementById(el.getAttribute('data-figure')).textContent);
    var layout = spec.layout || {}; layout.autosize = true; delete layout.width;
    Plotly.newPlot(el, spec.data || [], layout, {displaylogo: false, responsive: true,
      toImageButtonOptions: {format: 'png', filename: el.id, scale: 2}});
  }
})();
"""


def _e(x: object) -> str:
    """THE escaping function of the report: every string from data (names, ids, captions, cells, the
    footer) goes through it before it reaches the page, in text and in attribute values alike."""
    return html.escape(str(x), quote=True)


def figure_id(section_index: int, figure_index: int, key: str) -> str:
    """A figure's element id: a slug of its key for the reader, made unique by the figure's position
    (``fig-3-1-datamap_m-base``). Keys come from data (model and judge names): two names that differ
    only in characters the slug drops (a space vs ``_``) still get two ids, so each chart draws its own
    data; the slug holds only ``[A-Za-z0-9_-]``, so an id can never close its attribute."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", key).strip("-")[:48]
    return f"fig-{section_index}-{figure_index}" + (f"-{slug}" if slug else "")


def script_json(text: str) -> str:
    """JSON safe inside a ``<script>`` element: ``<``, ``>`` and ``&`` as ``\\u003c`` etc. (JSON reads
    them back unchanged; they occur only inside strings), so no name can close the element or open a
    comment."""
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def table_html(t: Table) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in t.columns)
    body = []
    for row in t.rows:
        tds = []
        for c in row:
            attrs = (f' data-key="{_e(c.key)}"' if c.key else "") + (
                f' data-value="{c.value!r}"' if c.value is not None else ""
            )
            cls = ' class="n"' if c.value is not None else ""
            tds.append(f"<td{cls}{attrs}>{_e(c.text)}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    foot = f'<p class="foot">{_e(t.footnote)}</p>' if t.footnote else ""
    return (
        f"<table><caption>{_e(t.caption)}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>{foot}"
    )


def _figure_html(fid: str, fig, table: Table | None, image: bytes | None) -> str:
    spec = script_json(fig.to_json())
    img = (
        '<noscript><img alt="static image of the figure" style="max-width:100%" '
        f'src="data:image/png;base64,{base64.b64encode(image).decode()}"></noscript>'
        if image
        else ""
    )
    return (
        f'<figure><div class="plot" id="{_e(fid)}" data-figure="{_e(fid)}-data"></div>'
        f'<script type="application/json" id="{_e(fid)}-data">{spec}</script>{img}'
        + (table_html(table) if table is not None else "")
        + "</figure>"
    )


def section_html(s: Section, index: int = 0, images: dict[str, bytes] | None = None) -> str:
    """One section (``index``: its position in the report, which makes its figure ids unique)."""
    parts = [f'<section id="{_e(s.key)}"><h2>{_e(s.title)}</h2>']
    parts += [f'<p class="warn" data-warning="1">Warning: {_e(w)}</p>' for w in s.warnings]
    parts += [f"<p>{_e(p)}</p>" for p in s.paragraphs]
    for j, f in enumerate(s.figures):
        fid = figure_id(index, j, f.key)
        parts.append(_figure_html(fid, f.fig, f.table, (images or {}).get(fid)))
    parts += [table_html(t) for t in s.tables]
    if s.code:
        parts.append("<pre><code>" + _e("\n".join(s.code)) + "</code></pre>")
    if s.methods:
        parts.append(f'<div class="methods"><strong>Methods.</strong> {_e(s.methods)}</div>')
    if s.references:
        parts.append('<p class="refs">References: ' + "; ".join(_e(r) for r in s.references) + ".</p>")
    return "\n".join(parts) + "</section>"


def static_images(report: Report) -> dict[str, bytes]:
    """PNG bytes of every figure (kaleido driving Chromium, one browser for all): the ``<noscript>``
    images."""
    import os
    import warnings

    import kaleido
    import plotly.io as pio

    os.environ.setdefault("BROWSER_PATH", "/usr/bin/chromium")
    out = {}
    kaleido.start_sync_server(silence_warnings=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore", UserWarning
            )  # plotly: "kopts is ignored if using a server" (we use one)
            for i, s in enumerate(report.sections):
                for j, f in enumerate(s.figures):
                    h = int(f.fig.layout.height or 420)
                    out[figure_id(i, j, f.key)] = pio.to_image(f.fig, format="png", width=1000, height=h)
    finally:
        kaleido.stop_sync_server(silence_warnings=True)
    return out


def report_html(report: Report, images: bool | dict[str, bytes] | None = False) -> str:
    """The whole page (``images``: also a PNG of each figure for readers without JavaScript, made here
    when True (slower) or given as :func:`static_images` made them)."""
    import plotly.offline

    imgs = (
        images
        if isinstance(images, dict)
        else static_images(report)
        if images and report.n_figures
        else None
    )
    toc = "".join(f'<li><a href="#{_e(s.key)}">{_e(s.title)}</a></li>' for s in report.sections)
    body = "\n".join(section_html(s, i, imgs) for i, s in enumerate(report.sections))
    js = f"<script>{plotly.offline.get_plotlyjs()}</script>" if report.n_figures else ""
    draw = f"<script>{DRAW}</script>" if report.n_figures else ""
    noscript = (
        (
            '<noscript><p class="warn">JavaScript is off: the interactive figures are not drawn. Every '
            "figure's numbers are in the table below it"
            + (" and a static image stands in for it" if imgs else "")
            + ".</p></noscript>"
        )
        if report.n_figures
        else ""
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="{_e(report.made_by)}"><title>{_e(report.title)}</title>'
        f"<style>{CSS}</style>{js}</head><body><main>"
        f'<h1>{_e(report.title)}</h1><p class="sub">{_e(report.subtitle)}</p>{noscript}'
        f"<nav><ol>{toc}</ol></nav>\n{body}\n"
        f"<footer>Made by {_e(report.made_by)} in {report.seconds:.1f} s. One self-contained file: it opens "
        f"offline and makes no network request.</footer></main>{draw}</body></html>\n"
    )


def report_json(report: Report) -> str:
    """The report's text and tables as JSON (no figures): what ``--json`` prints."""
    return json.dumps(
        {
            "title": report.title,
            "subtitle": report.subtitle,
            "made_by": report.made_by,
            "sections": [
                {
                    "key": s.key,
                    "title": s.title,
                    "paragraphs": s.paragraphs,
                    "warnings": s.warnings,
                    "n_figures": len(s.figures),
                }
                for s in report.sections
            ],
        },
        indent=1,
    )
