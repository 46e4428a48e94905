"""index.html: one self-contained file (inline CSS, figures as base64 data URIs) that opens from disk."""
from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from reporting.report_document import Document, Figure, Preformatted, Table

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; border-bottom: 1px solid #ccc; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.6em 0 1.4em; font-size: 0.85em; }
caption { text-align: left; font-weight: 600; padding: 0.3em 0; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; white-space: nowrap; }
td.holds { background: #e3f4e1; } td.fails { background: #fbe3e1; } td.na { background: #f3f3f3; }
td.incomplete, td.running { background: #fff1d6; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #555; }
pre { font-size: 0.75em; background: #f7f7f7; padding: 0.5em; overflow-x: auto; }
"""

_NUMBER = re.compile(r"^[+\-–]?\d")  # numbers and "mean ± sd" cells are right-aligned
_STATUS_CLASS = {"holds": "holds", "does not hold": "fails", "not evaluable": "na",
                 "incomplete": "incomplete", "running": "running"}


def _table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.headers)
    body = []
    for row in table.rows:
        cells = []
        for value in row:
            cls = _STATUS_CLASS.get(value) or ("num" if _NUMBER.match(value) else None)
            attr = f' class="{cls}"' if cls else ""
            cells.append(f"<td{attr}>{html.escape(value)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<table><caption>{html.escape(table.caption)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def _figure(figure: Figure) -> str:
    data = base64.b64encode(Path(figure.path).read_bytes()).decode("ascii")
    caption = html.escape(figure.caption)
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{caption}">'
            f"<figcaption>{caption} ({html.escape(Path(figure.path).name)})</figcaption></figure>")


def render_html(doc: Document) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(doc.title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{html.escape(doc.title)}</h1>"]
    parts += [f"<p>{html.escape(p)}</p>" for p in doc.intro]
    parts.append("<nav><ul>" + "".join(f'<li><a href="#s{i}">{html.escape(s.title)}</a></li>'
                                        for i, s in enumerate(doc.sections)) + "</ul></nav>")
    for i, section in enumerate(doc.sections):
        parts.append(f'<section id="s{i}"><h2>{html.escape(section.title)}</h2>')
        for block in section.blocks:
            if isinstance(block, Table):
                parts.append(_table(block))
            elif isinstance(block, Figure):
                parts.append(_figure(block))
            elif isinstance(block, Preformatted):
                parts.append(f"<details><summary>{html.escape(block.summary)}</summary>"
                             f"<pre>{html.escape(block.text)}</pre></details>")
            else:
                parts.append(f"<p>{html.escape(block)}</p>")
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_html(doc: Document, path: Path) -> Path:
    path.write_text(render_html(doc), encoding="utf-8")
    return path
