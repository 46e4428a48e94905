"""report.md: the report's text and tables in Markdown, figures linked as PNG files beside it."""
from __future__ import annotations

import os
from pathlib import Path

from reporting.report_document import Document, Figure, Preformatted, Table


def _cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def _table(table: Table) -> str:
    lines = [f"**{table.caption}**", "", "| " + " | ".join(_cell(h) for h in table.headers) + " |",
             "|" + "|".join("---" for _ in table.headers) + "|"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in table.rows]
    return "\n".join(lines)


def render_markdown(doc: Document, folder: Path, manifests: Path) -> str:
    """folder: where report.md goes (figure links are relative to it); manifests: the file holding
    every run's manifest (the resolved configs are listed there, not inlined)."""
    parts = [f"# {doc.title}", *doc.intro]
    for section in doc.sections:
        parts.append(f"## {section.title}")
        configs = [b for b in section.blocks if isinstance(b, Preformatted)]
        for block in section.blocks:
            if isinstance(block, Table):
                parts.append(_table(block))
            elif isinstance(block, Figure):
                rel = Path(os.path.relpath(block.path, folder)).as_posix()
                parts.append(f"![{block.caption}]({rel})")
            elif isinstance(block, str):
                parts.append(block)
        if configs:
            rel = Path(os.path.relpath(manifests, folder)).as_posix()
            parts.append(f"Resolved configurations ({len(configs)}): " + "; ".join(c.summary for c in configs)
                         + f". Full manifests: [{rel}]({rel}).")
    return "\n\n".join(parts) + "\n"


def write_markdown(doc: Document, path: Path, manifests: Path) -> Path:
    path.write_text(render_markdown(doc, path.parent, manifests), encoding="utf-8")
    return path
