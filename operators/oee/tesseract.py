"""Running the ``tesseract`` binary on a PNG: image on stdin, text on stdout (no Python wrapper)."""
from __future__ import annotations

import os
import shutil
import subprocess

from operators.schedstat import run_child


class TesseractMissing(RuntimeError):
    """The binary is not installed: an environment problem, not a bad input."""


class UnreadableImage(ValueError):
    """tesseract rejected the input (not an image, corrupt PNG) or did not finish in time."""


def ocr_text(png: bytes, command: str = "tesseract", psm: int = 6, lang: str = "eng",
             timeout_s: float = 30.0) -> str:
    """The text tesseract reads from ``png``. ``--psm 6``: one uniform block of text (the display's
    eight aligned lines), which reads them in order without layout analysis."""
    exe = shutil.which(command)
    if exe is None:
        raise TesseractMissing(f"{command!r} not found (apt-get install tesseract-ocr tesseract-ocr-eng)")
    # one OpenMP thread: faster for an image this small, and it does not steal the other instances' cores
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    try:
        # run_child: as subprocess.run, and the instance's run-queue delay includes tesseract's
        done = run_child([exe, "stdin", "stdout", "--psm", str(psm), "-l", lang], png, timeout_s, env)
    except subprocess.TimeoutExpired as exc:
        raise UnreadableImage(f"tesseract took more than {timeout_s:g} s") from exc
    if done.returncode != 0:
        raise UnreadableImage(f"tesseract failed ({done.returncode}): {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode("utf-8", errors="replace")
