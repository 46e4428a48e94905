"""Messages for a user or a manifest: one line each."""
from __future__ import annotations

from typing import Optional


def one_line(text: object, limit: Optional[int] = 240) -> str:
    """`text` on one line, cut at `limit` characters (None: never). A heading ending in ':' on the
    second line is followed by its items comma-separated, as Hydra lists a config group's options."""
    lines = [" ".join(line.split()) for line in str(text).splitlines() if line.strip()]
    if len(lines) > 2 and lines[1].endswith(":"):
        flat = f"{lines[0]}; {lines[1]} {', '.join(lines[2:])}"
    else:
        flat = " ".join(lines)
    return flat if limit is None or len(flat) <= limit else flat[: limit - 1] + "…"
