"""What a run of either backend hands back: its event-log tables, its length and backend facts."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict


@dataclass
class RunResult:
    tables: Dict[str, Dict[str, list]]
    duration_s: float
    details: Dict[str, Any] = field(default_factory=dict)  # for the manifest (live: accounting, images)
