"""A trivial operator for benchmarks of the runner and transports: one item out per item in,
with the input's type and payload, id ``<input id>/<op>``. Stateless; no params."""
from __future__ import annotations

from typing import Sequence

from operators.api import Emission, OperatorContext
from operators.envelope import Envelope


class Passthrough:
    def __init__(self, ctx: OperatorContext):
        if ctx.params:
            raise ValueError(f"{ctx.operator}.params: passthrough takes no parameters, got {sorted(ctx.params)}")
        self.ctx = ctx

    def process(self, item: Envelope) -> Sequence[Emission]:
        return [Emission(f"{item.item_id}/{self.ctx.operator}", item.type, item.payload)]

    def close(self) -> None:
        pass
