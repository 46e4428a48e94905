"""Small conversions for replies of a redis-py client, whether or not it decodes responses."""
from __future__ import annotations

from typing import Any

DEDUP_TTL_S = 3600  # how long processed input ids are remembered: far beyond any redelivery delay


def text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else str(value)
