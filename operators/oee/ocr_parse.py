"""O1 "parse and distribute": OCR of a machine's production display image (tesseract), parse its
fields, and publish one ``production_record`` to O1's fanout exchange, which copies it to O3, O4
and O5 (so one emission here is the 1:3 of docs/papers/btu-provisioning.md#operators).

Input: ``production`` items of S2 (payload ``png_b64``, ``operators.envelope.image_payload``).
Output: one ``production_record`` (``records.ProductionRecord``), id ``<input id>/<op>``, with
``record_id`` = the input's id (the key on which O7 joins the three parts). The machine id is the
envelope's (the display's line is only a cross-check the OCR may garble), the timestamp the
display's, else the envelope's origin. Stateless.

An input without a decodable PNG, one tesseract rejects, or one whose text lacks a required field
(``display_parser.REQUIRED``) or shows more defective than produced units raises ``PoisonItem``
(the runner dead-letters it). A missing tesseract binary is an environment error, not poison.

Params: ``tesseract`` ("tesseract", the command), ``psm`` (6), ``lang`` ("eng"), ``timeout_s`` (30).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from operators.api import Emission, OperatorContext, PoisonItem
from operators.envelope import Envelope, EnvelopeError, payload_image
from operators.oee.display_parser import DisplayParseError, parse_display_text
from operators.oee.params import parse_params
from operators.oee.records import PRODUCTION_RECORD, ProductionRecord
from operators.oee.tesseract import UnreadableImage, ocr_text


@dataclass(frozen=True)
class OcrParseParams:
    tesseract: str = "tesseract"
    psm: int = 6
    lang: str = "eng"
    timeout_s: float = 30.0

    def check(self) -> Optional[Tuple[str, str]]:
        return None if self.timeout_s > 0 else ("timeout_s", "must be > 0")


def record_from_text(item: Envelope, text: str) -> ProductionRecord:
    try:
        fields = parse_display_text(text)
    except DisplayParseError as exc:
        raise PoisonItem(f"{item.item_id}: {exc}") from exc
    if fields.defective_units > fields.produced_units:
        raise PoisonItem(f"{item.item_id}: display shows {fields.defective_units} defective of "
                         f"{fields.produced_units} produced units; text: {text!r}")
    return ProductionRecord(
        record_id=item.item_id, machine_id=item.machine_id, machine_type=fields.machine_type or "",
        location=fields.location or "", produced_units=fields.produced_units,
        defective_units=fields.defective_units, planned_production_time_s=fields.planned_production_time_s,
        status=fields.status, timestamp_ms=item.origin_ms if fields.timestamp_ms is None else fields.timestamp_ms,
    )


class OcrParse:
    def __init__(self, ctx: OperatorContext):
        self.ctx = ctx
        self.params = parse_params(OcrParseParams, ctx.params, ctx.operator)

    def read(self, png: bytes) -> str:
        p = self.params
        return ocr_text(png, command=p.tesseract, psm=p.psm, lang=p.lang, timeout_s=p.timeout_s)

    def process(self, item: Envelope) -> Sequence[Emission]:
        try:
            png = payload_image(item.payload)
        except EnvelopeError as exc:
            raise PoisonItem(f"{item.item_id}: {exc}") from exc
        try:
            text = self.read(png)
        except UnreadableImage as exc:
            raise PoisonItem(f"{item.item_id}: {exc}") from exc
        record = record_from_text(item, text)
        return [Emission(f"{item.item_id}/{self.ctx.operator}", PRODUCTION_RECORD, record.to_payload())]

    def close(self) -> None:
        pass
