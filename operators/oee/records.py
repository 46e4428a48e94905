"""The items the OEE operators send each other: emission types and typed payloads.

Every derived item of a production record carries ``record_id``, the id of the originating
production (S2) item: O7 joins the three parts of one reporting cycle on it. Payloads are plain
JSON objects; ``from_payload`` raises ``PoisonItem`` for one that can never be processed.

| type | from | payload |
|---|---|---|
| ``production_record`` | O1 | ``ProductionRecord`` fields |
| ``performance`` / ``availability`` / ``quality`` | O3 / O4 / O5 | ``PartValue`` fields |
| ``oee`` | O7 | ``OeeValue`` fields |
| ``report`` | O9 | ``ReportNotice`` fields |
| ``warning`` | O2, O6 | ``IncidentWarning`` fields |
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple, Type, TypeVar

from operators.api import PoisonItem

PRODUCTION_RECORD = "production_record"
PERFORMANCE, AVAILABILITY, QUALITY = "performance", "availability", "quality"
PARTS: Tuple[str, ...] = (AVAILABILITY, PERFORMANCE, QUALITY)
OEE = "oee"
REPORT = "report"
WARNING = "warning"

# the statuses a machine's display and availability sensor report (testbed.workloads.payloads.STATUSES)
AVAILABLE, PLANNED_DOWNTIME, DEFECT = "available", "planned downtime", "defect"
STATUSES: Tuple[str, ...] = (AVAILABLE, PLANNED_DOWNTIME, DEFECT)

R = TypeVar("R")


def _from_payload(cls: Type[R], payload: Mapping[str, Any], what: str) -> R:
    values: Dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in payload:
            if f.default is not dataclasses.MISSING:
                continue
            raise PoisonItem(f"{what}: payload lacks {f.name!r}")
        value = payload[f.name]
        expected = f.type if isinstance(f.type, str) else f.type.__name__
        if expected.startswith("Optional[") and value is None:
            values[f.name] = None
            continue
        base = expected.removeprefix("Optional[").removesuffix("]")
        ok = {"str": isinstance(value, str),
              "int": isinstance(value, int) and not isinstance(value, bool),
              "float": isinstance(value, (int, float)) and not isinstance(value, bool)
                       and math.isfinite(float(value))}.get(base, True)
        if not ok:
            raise PoisonItem(f"{what}: {f.name} must be {base}, got {value!r}")
        values[f.name] = float(value) if base == "float" else value
    return cls(**values)


@dataclass(frozen=True)
class ProductionRecord:
    """One reporting cycle of one machine as read from its display by O1."""

    record_id: str  # the production item's id (the join key of O7)
    machine_id: str
    machine_type: str  # "" when the display's line was unreadable
    location: str
    produced_units: int
    defective_units: int
    planned_production_time_s: int
    status: str
    timestamp_ms: int

    def to_payload(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> "ProductionRecord":
        record = _from_payload(cls, payload, PRODUCTION_RECORD)
        if record.produced_units < 0 or record.defective_units < 0 or record.planned_production_time_s < 0:
            raise PoisonItem(f"{PRODUCTION_RECORD}: negative count in {dict(payload)!r}")
        return record


@dataclass(frozen=True)
class PartValue:
    """One of O3/O4/O5's results for one production record."""

    record_id: str
    machine_id: str
    part: str  # performance | availability | quality
    value: float
    timestamp_ms: int

    def to_payload(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> "PartValue":
        part = _from_payload(cls, payload, "part")
        if part.part not in PARTS:
            raise PoisonItem(f"part: unknown part {part.part!r}; known: {', '.join(PARTS)}")
        return part


@dataclass(frozen=True)
class OeeValue:
    record_id: str
    machine_id: str
    availability: float
    performance: float
    quality: float
    oee: float
    timestamp_ms: int

    def to_payload(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> "OeeValue":
        return _from_payload(cls, payload, OEE)


@dataclass(frozen=True)
class ReportNotice:
    """O9's notification that a PDF report was written."""

    path: str
    batch: int
    inputs: int
    machines: int
    mean_oee: float
    min_oee: float
    max_oee: float
    mean_availability: float
    mean_performance: float
    mean_quality: float

    def to_payload(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class IncidentWarning:
    """O2's / O6's warning about a new incident of a machine."""

    kind: str  # "defect" (O2) | "temperature" (O6)
    machine_id: str
    incident: int  # 1, 2, ... per machine and kind
    since_ms: int  # the timestamp of the reading that opened the incident
    message: str
    value: Optional[float] = None  # the temperature (O6)

    def to_payload(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)
