"""Reading the fields of a production display (850×300 PNG, 8 lines ``key  :  value``, rendered by
``data_provider.display_image``) out of tesseract's text, tolerant of OCR noise:

* a line's key is matched to the closest known label (letters only, case-folded), with or without
  a separator (``:``, ``;``, ``=``, ``>``, ``.`` or none at all);
* numbers survive the usual confusions (O/o/D/Q → 0, l/I/i/|/! → 1, S → 5, B → 8, Z → 2) and
  stray spaces, commas, dots and quotes; the unit after the planned production time is dropped;
* status and machine type snap to the closest known value; location and machine id are normalised.

Required are the fields the calculations need (produced, defective, planned production time,
status); the others may be unreadable (machine id, type, location, timestamp: the envelope has the
id and the origin time; an unknown type gets O3's default ideal cycle time).
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from operators.oee.records import STATUSES

LABELS: Tuple[Tuple[str, str], ...] = (  # (label on the display, field), in display order
    ("machine id", "machine_id"),
    ("machine type", "machine_type"),
    ("location", "location"),
    ("produced units", "produced_units"),
    ("defective units", "defective_units"),
    ("planned production time", "planned_production_time_s"),
    ("status", "status"),
    ("timestamp", "timestamp_ms"),
)
MACHINE_TYPES: Tuple[str, ...] = ("injection moulding", "cnc milling", "assembly")  # testbed.workloads.payloads
REQUIRED: Tuple[str, ...] = ("produced_units", "defective_units", "planned_production_time_s", "status")
INTEGERS = frozenset({"produced_units", "defective_units", "planned_production_time_s", "timestamp_ms"})

_KEY_OF = {re.sub(r"[^a-z]", "", label): name for label, name in LABELS}
_MAX_KEY_WORDS = max(len(label.split()) for label, _ in LABELS)
_SEPARATOR = re.compile(r"\s*[:;=>]+\s*|\s+\.\s+|\s{2,}")
_DIGITS = str.maketrans({"O": "0", "o": "0", "D": "0", "Q": "0", "l": "1", "I": "1", "i": "1", "|": "1",
                         "!": "1", "S": "5", "s": "5", "B": "8", "Z": "2", "z": "2"})


class DisplayParseError(ValueError):
    """Text that lacks a required field; ``missing`` names them, ``text`` is what was read."""

    def __init__(self, missing: Tuple[str, ...], text: str, problems: Tuple[str, ...] = ()):
        detail = f" ({'; '.join(problems)})" if problems else ""
        super().__init__(f"production display: cannot read {', '.join(missing)}{detail}; text: {text!r}")
        self.missing = missing
        self.text = text


@dataclass(frozen=True)
class DisplayFields:
    produced_units: int
    defective_units: int
    planned_production_time_s: int
    status: str
    machine_id: Optional[str] = None
    machine_type: Optional[str] = None
    location: Optional[str] = None
    timestamp_ms: Optional[int] = None


def key_of(raw: str) -> Optional[str]:
    letters = re.sub(r"[^a-z]", "", raw.lower())
    if not letters:
        return None
    if letters in _KEY_OF:
        return _KEY_OF[letters]
    close = difflib.get_close_matches(letters, list(_KEY_OF), n=1, cutoff=0.75)
    return _KEY_OF[close[0]] if close else None


def integer(raw: str, unit: bool = False) -> int:
    value = raw.strip()
    if unit:  # "60 s", "60s", "60 sec", "60 5" / "60 $" (the unit misread after a space); "6 0" stays 60
        value = re.sub(r"\s*(s|secs?|seconds)\.?$", "", value, flags=re.IGNORECASE)
        value = re.sub(r"\s+[5$§]$", "", value)
    digits = re.sub(r"[\s,.'’`]", "", value).translate(_DIGITS)
    if not re.fullmatch(r"\d+", digits):
        raise ValueError(f"not a number: {raw!r}")
    return int(digits)


def closest(raw: str, choices: Tuple[str, ...], cutoff: float = 0.6) -> Optional[str]:
    squeezed = {c.replace(" ", ""): c for c in choices}
    match = difflib.get_close_matches(re.sub(r"[^a-z]", "", raw.lower()), list(squeezed), n=1, cutoff=cutoff)
    return squeezed[match[0]] if match else None


def _value(name: str, raw: str) -> object:
    raw = " ".join(raw.split())
    if name in INTEGERS:
        return integer(raw, unit=(name == "planned_production_time_s"))
    if name == "status":
        status = closest(raw, STATUSES)
        if status is None:
            raise ValueError(f"unknown status {raw!r}")
        return status
    if name == "machine_type":
        return closest(raw, MACHINE_TYPES) or raw
    if name == "machine_id":
        m = re.fullmatch(r"machine\s*[-–—_~.]?\s*(\S+)", raw, flags=re.IGNORECASE)
        if m:
            try:
                return f"machine-{integer(m.group(1)):02d}"
            except ValueError:
                pass
        return raw.replace(" ", "")
    if name == "location":
        m = re.fullmatch(r"ha[l1I|]{2}\s*(\S+?)\s*[,;]?\s*[l1I|]ine\s*(\S+)", raw, flags=re.IGNORECASE)
        if m:
            try:
                return f"hall {integer(m.group(1))} line {integer(m.group(2))}"
            except ValueError:
                pass
        return raw
    return raw


def _split(line: str) -> Optional[Tuple[str, str]]:
    """(field, raw value) of one line, or None for a line that names no known field."""
    parts = _SEPARATOR.split(line, maxsplit=1)
    if len(parts) == 2 and parts[1]:
        name = key_of(parts[0])
        if name is not None:
            return name, parts[1]
    words = line.split()  # no usable separator: try the first 1..4 words as the key
    for n in range(min(_MAX_KEY_WORDS, len(words) - 1), 0, -1):
        name = key_of(" ".join(words[:n]))
        if name is not None:
            value = " ".join(words[n:]).lstrip(":;=>. ")
            if value:
                return name, value
    return None


def parse_display_text(text: str) -> DisplayFields:
    """The display's fields from OCR text; raises DisplayParseError naming the required ones missing."""
    found: Dict[str, object] = {}
    problems = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        split = _split(line)
        if split is None or split[0] in found:
            continue
        name, raw = split
        try:
            found[name] = _value(name, raw)
        except ValueError as exc:
            problems.append(f"{name}: {exc}")
    missing = tuple(name for name in REQUIRED if name not in found)
    if missing:
        raise DisplayParseError(missing, text, tuple(problems))
    return DisplayFields(**found)  # type: ignore[arg-type]
