"""Small operators for the runner's integration tests and benchmark (loaded by the runner
subprocess through OPERATOR_FACTORY=tests.integration.runner_operators:make)."""
from __future__ import annotations

from typing import Sequence

from operators.api import Emission, OperatorContext, PoisonItem
from operators.envelope import Envelope


class Relabel:
    """One emission per input, id ``<input id>/<operator>``; an input with payload
    ``{"poison": true}`` is a ``PoisonItem``."""

    def __init__(self, ctx: OperatorContext):
        self.name = ctx.operator

    def process(self, item: Envelope) -> Sequence[Emission]:
        if item.payload.get("poison"):
            raise PoisonItem("marked poison")
        return [Emission(item_id=f"{item.item_id}/{self.name}", type=f"{item.type}+{self.name}",
                         payload=dict(item.payload))]

    def close(self) -> None:
        pass


def make(name: str, ctx: OperatorContext) -> Relabel:
    return Relabel(ctx)
