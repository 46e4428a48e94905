"""O9 "generate report": one PDF report per ``batch_size`` (300) OEE values, across all machines,
and a small ``report`` notice to O8.

One Lua script per input counts it into the current batch, at most once per input id: it appends
the value to the batch's list, and the input that fills the batch is its *completer*. Only the
completer renders the PDF (``<report_dir>/report-<batch>.pdf``, written to a temporary file and
renamed, so a reader never sees half a file) and emits the notice (id ``<prefix>/<op>/report/<batch>``);
a redelivered completer renders the same batch again and emits the same notice. Batches are
numbered from 0 in input order; with racing instances each value lands in exactly one batch.

Keys:

* counter ``<prefix>:<op>:count``: inputs counted so far;
* list ``<prefix>:<op>:batch:<n>``: the batch's values (JSON ``OeeValue`` payloads); expires
  ``dedup_ttl_s`` after it is full;
* string ``<prefix>:<op>:seen:<item_id>`` (TTL ``dedup_ttl_s``): ``<batch>`` or ``<batch>:last``.

The notice's ``origin_ms`` is the completer's (the newest reading the report covers, roughly).

Params: ``batch_size`` (300), ``report_dir`` (``<tmp>/testbed-reports/<prefix>``), ``dedup_ttl_s`` (3600).
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from operators.api import Emission, OperatorContext, PoisonItem
from operators.envelope import Envelope
from operators.oee.params import parse_params
from operators.oee.records import REPORT, OeeValue, ReportNotice
from operators.oee.redis_values import DEDUP_TTL_S, text

# KEYS[1] seen key, KEYS[2] counter, KEYS[3] batch key prefix; ARGV[1] batch size, ARGV[2] value
# JSON, ARGV[3] ttl. Returns {batch, 1 if this input completed it else 0}.
_COUNT_ONCE = """
local done = redis.call('GET', KEYS[1])
if done then
  local batch, rest = string.match(done, '^(%d+)(.*)$')
  return {tonumber(batch), rest == ':last' and 1 or 0}
end
local n = redis.call('INCR', KEYS[2])
local size = tonumber(ARGV[1])
local batch = math.floor((n - 1) / size)
local key = KEYS[3] .. batch
redis.call('RPUSH', key, ARGV[2])
local last = 0
if n % size == 0 then
  last = 1
  redis.call('EXPIRE', key, ARGV[3])
end
redis.call('SET', KEYS[1], last == 1 and (batch .. ':last') or tostring(batch), 'EX', ARGV[3])
return {batch, last}
"""


@dataclass(frozen=True)
class ReportParams:
    batch_size: int = 300
    report_dir: str = ""  # "" = <tmp>/testbed-reports/<prefix>
    dedup_ttl_s: int = DEDUP_TTL_S

    def check(self) -> Optional[Tuple[str, str]]:
        return None if self.batch_size > 0 else ("batch_size", "must be > 0")


def summarise(values: Sequence[OeeValue], path: str, batch: int) -> ReportNotice:
    oee = [v.oee for v in values]
    return ReportNotice(
        path=path, batch=batch, inputs=len(values), machines=len({v.machine_id for v in values}),
        mean_oee=statistics.fmean(oee), min_oee=min(oee), max_oee=max(oee),
        mean_availability=statistics.fmean(v.availability for v in values),
        mean_performance=statistics.fmean(v.performance for v in values),
        mean_quality=statistics.fmean(v.quality for v in values),
    )


def render_pdf(values: Sequence[OeeValue], notice: ReportNotice, title: str) -> bytes:
    """The report: the batch's summary and one row per machine (values, mean A, P, Q, OEE)."""
    from fpdf import FPDF  # imported here: only O9 needs it

    pdf = FPDF()
    # a fixed creation date (the newest reading's), so the same batch always gives the same bytes
    pdf.set_creation_date(datetime.fromtimestamp(max(v.timestamp_ms for v in values) / 1000, tz=timezone.utc))
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 16)
    pdf.cell(0, 10, title, new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", size=10)
    first, last = min(v.timestamp_ms for v in values), max(v.timestamp_ms for v in values)
    span = (f"{datetime.fromtimestamp(first / 1000, tz=timezone.utc):%Y-%m-%d %H:%M:%S} - "
            f"{datetime.fromtimestamp(last / 1000, tz=timezone.utc):%Y-%m-%d %H:%M:%S} UTC")
    for line in (f"Batch {notice.batch}: {notice.inputs} OEE values of {notice.machines} machines, readings {span}",
                 f"OEE mean {notice.mean_oee:.3f} (min {notice.min_oee:.3f}, max {notice.max_oee:.3f}); "
                 f"availability {notice.mean_availability:.3f}, performance {notice.mean_performance:.3f}, "
                 f"quality {notice.mean_quality:.3f}"):
        pdf.cell(0, 6, line, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)
    by_machine: Dict[str, List[OeeValue]] = defaultdict(list)
    for v in values:
        by_machine[v.machine_id].append(v)
    with pdf.table(text_align="RIGHT") as table:
        table.row(("machine", "values", "availability", "performance", "quality", "OEE"))
        for machine in sorted(by_machine):
            vs = by_machine[machine]
            table.row((machine, str(len(vs)),
                       *(f"{statistics.fmean(getattr(v, f) for v in vs):.3f}"
                         for f in ("availability", "performance", "quality", "oee"))))
    return bytes(pdf.output())


class ReportGenerator:
    def __init__(self, ctx: OperatorContext):
        self.ctx = ctx
        self.params = parse_params(ReportParams, ctx.params, ctx.operator)
        self.report_dir = Path(self.params.report_dir or Path(tempfile.gettempdir()) / "testbed-reports" / ctx.prefix)
        self._script = ctx.redis.register_script(_COUNT_ONCE)
        self._base = f"{ctx.prefix}:{ctx.operator}"

    def batch_key(self, batch: int) -> str:
        return f"{self._base}:batch:{batch}"

    def process(self, item: Envelope) -> Sequence[Emission]:
        value = OeeValue.from_payload(item.payload)
        reply = self._script(keys=[f"{self._base}:seen:{item.item_id}", f"{self._base}:count", f"{self._base}:batch:"],
                             args=[self.params.batch_size, json.dumps(value.to_payload(), sort_keys=True),
                                   self.params.dedup_ttl_s])
        batch, last = int(reply[0]), int(reply[1])
        if not last:
            return []
        raw = self.ctx.redis.lrange(self.batch_key(batch), 0, -1)
        if len(raw) != self.params.batch_size:  # expired: a redelivery later than dedup_ttl_s
            raise PoisonItem(f"{item.item_id}: batch {batch} holds {len(raw)} of {self.params.batch_size} values")
        values = [OeeValue.from_payload(json.loads(text(r))) for r in raw]
        path = self.report_dir / f"report-{batch:06d}.pdf"
        notice = summarise(values, str(path), batch)
        self._write(path, render_pdf(values, notice, f"OEE report {self.ctx.prefix} #{batch}"))
        return [Emission(f"{self.ctx.prefix}/{self.ctx.operator}/report/{batch}", REPORT, notice.to_payload(),
                         machine_id="all")]

    def _write(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".report-", suffix=".pdf")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise

    def close(self) -> None:
        pass
