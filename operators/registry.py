"""Operator implementations by name: what the runner instantiates for an operator type.

``OPERATORS["O3"](ctx)`` builds one instance (it may raise ``OperatorParamError``, naming the key,
for bad ``ctx.params``); ``make_operator(name, ctx)`` does the same and fails clearly for an
unknown name. The OEE operators' logic, Redis keys, params and emissions are documented in their
modules (``operators/oee/``); "passthrough" is a one-in-one-out operator for benchmarks. A, B,
C and D, the PRESPS paper's chain (docs/papers/presps.md), are pass-through operators whose service
is the runner's emulated work (``WORK_MS``, set per operator by ``backend.live.work_ms``).
"""
from __future__ import annotations

from typing import Callable, Mapping

from operators.api import Operator, OperatorContext
from operators.oee.availability import AvailabilityCalculator
from operators.oee.availability_filter import AvailabilityFilter
from operators.oee.latency_sink import LatencySink
from operators.oee.ocr_parse import OcrParse
from operators.oee.oee_join import OeeJoin
from operators.oee.performance import PerformanceCalculator
from operators.oee.quality import QualityCalculator
from operators.oee.report import ReportGenerator
from operators.oee.temperature_monitor import TemperatureMonitor
from operators.passthrough import Passthrough

OPERATORS: Mapping[str, Callable[[OperatorContext], Operator]] = {
    "O1": OcrParse,  # parse and distribute (OCR)
    "O2": AvailabilityFilter,  # warn once per new defect incident
    "O3": PerformanceCalculator,
    "O4": AvailabilityCalculator,
    "O5": QualityCalculator,
    "O6": TemperatureMonitor,  # warn once per new threshold violation
    "O7": OeeJoin,  # OEE = A x P x Q per production record
    "O8": LatencySink,  # records end-to-end latency, emits nothing
    "O9": ReportGenerator,  # one PDF per batch_size OEE values
    "passthrough": Passthrough,
    # the PRESPS chain A -> B -> C -> D (experiments/conf/topology/presps_chain.yaml)
    "A": Passthrough,
    "B": Passthrough,
    "C": Passthrough,
    "D": Passthrough,
}


class UnknownOperator(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def make_operator(name: str, ctx: OperatorContext) -> Operator:
    try:
        factory = OPERATORS[name]
    except KeyError:
        raise UnknownOperator(f"unknown operator {name!r}; known: {', '.join(OPERATORS)}") from None
    return factory(ctx)
