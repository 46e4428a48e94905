"""The production display image: render a ProductionRecord as an 850×300 PNG and read it back.

The image is what VISP's provider sent (docs/papers/btu-provisioning.md#visp-data-provider): white
background, black text, eight lines ``key  :  value`` (machine id, machine type, location,
produced units, defective units, planned production time, status, timestamp), ~12 kB.

Reading it back is O1's work: ``tesseract`` (the binary, called through subprocess; no Python
wrapper needed) and a tolerant parser: keys are matched to the closest known key, numbers survive
the usual OCR confusions (O/o → 0, l/I/| → 1), whitespace is normalised, status and machine type
snap to the closest known value, and the location and machine id are put back into canonical form.

The font is DejaVu Sans (Debian's ``fonts-dejavu-core``; tesseract reads it back exactly); set
``TESTBED_DISPLAY_FONT`` to another TrueType file. Without one, Pillow's bundled font is used,
which tesseract reads less reliably.
"""
from __future__ import annotations

import difflib
import functools
import io
import os
import re
import shutil
import subprocess
import warnings
from dataclasses import fields
from pathlib import Path
from typing import Dict, Optional, Tuple

from PIL import Image, ImageDraw, ImageFont

from operators.oee.display_parser import LABELS as DISPLAY_LABELS
from testbed.workloads.payloads import MACHINE_TYPES, STATUSES, ProductionRecord

WIDTH, HEIGHT = 850, 300
FONT_SIZE = 24
LINE_HEIGHT = 35
MARGIN_X, MARGIN_Y = 40, 10
SEPARATOR = "  :  "
FONT_CANDIDATES = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/local/share/fonts/DejaVuSans.ttf",
    "DejaVuSans.ttf",  # Pillow also searches the system font folders
)

# (label on the display, ProductionRecord field), in display order: the layout O1 parses
LINES: Tuple[Tuple[str, str], ...] = DISPLAY_LABELS
INT_FIELDS = {"produced_units", "defective_units", "planned_production_time_s", "timestamp_ms"}
UNITS = {"planned_production_time_s": " s"}


class DisplayReadError(ValueError):
    """OCR text that does not yield every field; ``missing`` names them, ``text`` is what was read."""

    def __init__(self, missing: Tuple[str, ...], text: str, detail: str = ""):
        super().__init__(f"production display: cannot read {', '.join(missing)}"
                         + (f" ({detail})" if detail else "") + f"; OCR text: {text!r}")
        self.missing = missing
        self.text = text


@functools.cache
def display_font(size: int = FONT_SIZE) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    override = os.environ.get("TESTBED_DISPLAY_FONT")
    for candidate in ((override,) if override else ()) + FONT_CANDIDATES:
        try:
            return ImageFont.truetype(candidate, size)
        except OSError:
            continue
    warnings.warn("DejaVu Sans not found (apt-get install fonts-dejavu-core): the production display uses "
                  "Pillow's bundled font, which tesseract reads less reliably", RuntimeWarning, stacklevel=2)
    return ImageFont.load_default(size=size)


def display_lines(record: ProductionRecord) -> Tuple[str, ...]:
    return tuple(f"{label}{SEPARATOR}{getattr(record, name)}{UNITS.get(name, '')}" for label, name in LINES)


def render_display(record: ProductionRecord, compress_level: int = 3) -> bytes:
    """The PNG bytes of the record's display (8-bit grey; level 3 is ~5 ms and ~12 kB)."""
    img = Image.new("L", (WIDTH, HEIGHT), 255)
    draw = ImageDraw.Draw(img)
    font = display_font()
    for i, line in enumerate(display_lines(record)):
        draw.text((MARGIN_X, MARGIN_Y + i * LINE_HEIGHT), line, fill=0, font=font)
    buf = io.BytesIO()
    img.save(buf, "PNG", compress_level=compress_level)
    return buf.getvalue()


# ---- reading back ----------------------------------------------------------------------------

def tesseract_available() -> bool:
    return shutil.which("tesseract") is not None


def ocr(png: bytes, timeout_s: float = 30.0) -> str:
    """The text tesseract reads from a PNG (one uniform block of text, English)."""
    exe = shutil.which("tesseract")
    if exe is None:
        raise FileNotFoundError("tesseract not found (apt-get install tesseract-ocr; bash infra/services.sh install)")
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}  # one thread: faster for small images, no CPU spikes
    done = subprocess.run([exe, "stdin", "stdout", "--psm", "6", "-l", "eng"], input=png,
                          capture_output=True, timeout=timeout_s, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tesseract failed ({done.returncode}): {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode("utf-8", errors="replace")


_SEPARATOR_RE = re.compile(r"\s*[:;=>]\s*")
_DIGIT_FIXES = str.maketrans({"O": "0", "o": "0", "D": "0", "Q": "0", "l": "1", "I": "1", "|": "1",
                              "i": "1", "!": "1", "S": "5", "B": "8", "Z": "2", "z": "2"})
_KEYS: Dict[str, str] = {re.sub(r"[^a-z]", "", label): name for label, name in LINES}


def _key_of(raw: str) -> Optional[str]:
    key = re.sub(r"[^a-z]", "", raw.lower())
    if key in _KEYS:
        return _KEYS[key]
    close = difflib.get_close_matches(key, list(_KEYS), n=1, cutoff=0.75)
    return _KEYS[close[0]] if close else None


def _int(value: str, name: str) -> int:
    if name in UNITS:  # drop a unit ("60 s", "60s", "60 sec")
        value = re.sub(r"\s*s(ec)?\.?\s*$", "", value.strip(), flags=re.IGNORECASE)
    digits = re.sub(r"[\s,.'’`]", "", value).translate(_DIGIT_FIXES)
    if not re.fullmatch(r"\d+", digits):
        raise ValueError(f"{name}: not a number: {value!r}")
    return int(digits)


def _closest(value: str, choices: Tuple[str, ...], name: str) -> str:
    norm = " ".join(value.lower().split())
    squeezed = {c.replace(" ", ""): c for c in choices}
    match = difflib.get_close_matches(norm.replace(" ", ""), list(squeezed), n=1, cutoff=0.6)
    if not match:
        raise ValueError(f"{name}: {value!r} is none of {list(choices)}")
    return squeezed[match[0]]


def _value(name: str, raw: str) -> object:
    raw = raw.strip()
    if name in INT_FIELDS:
        return _int(raw, name)
    if name == "status":
        return _closest(raw, STATUSES, name)
    if name == "machine_type":
        try:
            return _closest(raw, MACHINE_TYPES, name)
        except ValueError:
            return " ".join(raw.split())
    if name == "machine_id":
        m = re.fullmatch(r"machine\s*[-–—_~]?\s*(\S+)", raw, flags=re.IGNORECASE)
        if m and re.fullmatch(r"\d+", m.group(1).translate(_DIGIT_FIXES)):
            return f"machine-{int(m.group(1).translate(_DIGIT_FIXES)):02d}"
        return raw.replace(" ", "")
    if name == "location":
        m = re.fullmatch(r"hall\s*(\S+?)\s*[,;]?\s*line\s*(\S+)", raw, flags=re.IGNORECASE)
        if m:
            try:
                return f"hall {_int(m.group(1), name)} line {_int(m.group(2), name)}"
            except ValueError:
                pass
        return " ".join(raw.split())
    return raw


def parse_display(text: str) -> ProductionRecord:
    """A ProductionRecord from OCR text; raises DisplayReadError naming the fields it cannot read."""
    found: Dict[str, object] = {}
    problems = []
    for line in text.splitlines():
        parts = _SEPARATOR_RE.split(line.strip(), maxsplit=1)
        if len(parts) != 2:
            continue
        name = _key_of(parts[0])
        if name is None or name in found:
            continue
        try:
            found[name] = _value(name, parts[1])
        except ValueError as exc:
            problems.append(str(exc))
    missing = tuple(f.name for f in fields(ProductionRecord) if f.name not in found)
    if missing:
        raise DisplayReadError(missing, text, "; ".join(problems))
    return ProductionRecord(**found)  # type: ignore[arg-type]


def read_display(png: bytes, timeout_s: float = 30.0) -> ProductionRecord:
    return parse_display(ocr(png, timeout_s))


def save_display(record: ProductionRecord, path: str | Path) -> Path:
    path = Path(path)
    path.write_bytes(render_display(record))
    return path
