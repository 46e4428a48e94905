"""The message envelope every item travels in, on RabbitMQ and Kafka alike.

One JSON object (UTF-8), compact::

    {"v": 1, "id": "m03/S1_availability/124/2", "machine": "m03", "type": "availability",
     "origin_ms": 1763788812345, "sent_ms": 1763788812351, "payload": {...}}

* ``id``: unique within a run (the provider uses ``<machine>/<source>/<tick>/<n>``); consumers
  may deduplicate on it (delivery is at least once: a publisher republishes unconfirmed messages
  after a broker restart).
* ``origin_ms``: epoch milliseconds when the reading was taken (the source's timestamp); operators
  copy it to what they derive from the item, so end-to-end latency stays measurable.
* ``sent_ms``: epoch milliseconds when this hop's producer sent the message; an operator's duration
  sample is its receive time minus ``sent_ms`` (ms precision; the ``visp2017`` profile uses the
  AMQP ``timestamp`` property instead, which carries whole seconds).
* ``payload``: the type's fields. **Images** (type ``production``) travel as base64 PNG inside the
  JSON (``payload = {"png_b64": ...}``): one format for both transports, self-describing, at the
  price of +33 % on ~12 kB.

On RabbitMQ the same facts are also set as message properties (``amqp_properties``): persistent
delivery, ``message_id``, ``type``, ``timestamp`` (whole seconds, as AMQP defines it),
``content_type`` and a ``sent_ms`` header.
"""
from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Mapping

ENVELOPE_VERSION = 1
CONTENT_TYPE = "application/json"
IMAGE_KEY = "png_b64"


class EnvelopeError(ValueError):
    """A message that is not a valid envelope; the message names the offending field."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass(frozen=True)
class Envelope:
    item_id: str
    machine_id: str
    type: str
    origin_ms: int
    sent_ms: int
    payload: Mapping[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps(
            {"v": ENVELOPE_VERSION, "id": self.item_id, "machine": self.machine_id, "type": self.type,
             "origin_ms": self.origin_ms, "sent_ms": self.sent_ms, "payload": self.payload},
            separators=(",", ":"), ensure_ascii=False,
        ).encode("utf-8")

    def sent_at(self, sent_ms: int) -> "Envelope":
        return replace(self, sent_ms=int(sent_ms))

    @classmethod
    def decode(cls, data: bytes | str) -> "Envelope":
        try:
            obj = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise EnvelopeError("body", f"not JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise EnvelopeError("body", f"expected a JSON object, got {type(obj).__name__}")
        if obj.get("v") != ENVELOPE_VERSION:
            raise EnvelopeError("v", f"unsupported envelope version {obj.get('v')!r} (expected {ENVELOPE_VERSION})")
        for key in ("id", "machine", "type"):
            if not isinstance(obj.get(key), str) or not obj[key]:
                raise EnvelopeError(key, f"must be a non-empty string, got {obj.get(key)!r}")
        for key in ("origin_ms", "sent_ms"):
            if not isinstance(obj.get(key), int) or isinstance(obj[key], bool):
                raise EnvelopeError(key, f"must be an integer (epoch ms), got {obj.get(key)!r}")
        payload = obj.get("payload", {})
        if not isinstance(payload, dict):
            raise EnvelopeError("payload", f"must be an object, got {type(payload).__name__}")
        return cls(obj["id"], obj["machine"], obj["type"], obj["origin_ms"], obj["sent_ms"], payload)


def image_payload(png: bytes) -> Dict[str, str]:
    return {IMAGE_KEY: base64.b64encode(png).decode("ascii")}


def payload_image(payload: Mapping[str, Any]) -> bytes:
    """The PNG bytes of an image payload."""
    value = payload.get(IMAGE_KEY)
    if not isinstance(value, str):
        raise EnvelopeError(f"payload.{IMAGE_KEY}", "missing or not a string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EnvelopeError(f"payload.{IMAGE_KEY}", f"not base64: {exc}") from exc


def amqp_properties(envelope: Envelope) -> Dict[str, Any]:
    """Keyword arguments for ``pika.BasicProperties`` of a persistent message carrying ``envelope``."""
    return {
        "content_type": CONTENT_TYPE,
        "delivery_mode": 2,  # persistent
        "message_id": envelope.item_id,
        "type": envelope.type,
        "timestamp": envelope.sent_ms // 1000,  # AMQP timestamps are whole seconds
        "headers": {"sent_ms": envelope.sent_ms},
    }
