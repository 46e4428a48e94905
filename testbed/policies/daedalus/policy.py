"""Daedalus as a registered policy (`daedalus`): its parameters with the paper's defaults and the
code's behaviours behind the named flags (docs/papers/daedalus.md#paper-vs-code-flags)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

from testbed.model import Action, Snapshot
from testbed.placement.base import Placement
from testbed.policies.contract import Policy, time_field
from testbed.policies.daedalus.capacity import CapacityModel, SkewRule, WelfordMode
from testbed.policies.daedalus.controller import DaedalusController, LoopWindow
from testbed.policies.daedalus.decision import DecisionSettings, LagCheck
from testbed.policies.daedalus.forecast import Forecaster, ForecastMode, RetrainCounter
from testbed.policies.daedalus.recovery import RtSemantics
from testbed.policies.job_inputs import JOB_OPERATOR, JobSnapshot
from testbed.policies.registry import register_policy
from testbed.policies.scaling import target_of


@dataclass
class DaedalusParams:
    loop_s: float = time_field(60.0)
    max_scaleout: int = 18
    rt_target_s: float = time_field(600.0)
    grace_s: float = time_field(180.0)
    keep_s: float = time_field(600.0)
    warmup_s: float = time_field(120.0)
    horizon_s: int = time_field(900)
    downtime_out_s: int = time_field(30)  # start values of the adapted downtimes
    downtime_in_s: int = time_field(15)
    initial_replicas: int = 0  # job mode: 0 = the job's initial parallelism; the code starts at 1
    forecast_mode: ForecastMode = ForecastMode.fast
    fast_history_s: int = time_field(1800)  # fast mode: the bounded history the fixed-order model is refitted on
    # flags: paper (default) vs code
    skew_rule: SkewRule = SkewRule.proportional
    welford: WelfordMode = WelfordMode.exact
    fallback_horizon_s: int = time_field(900)
    retrain_threshold: float = 0.25
    retrain_repeat: bool = False
    lag_check: LagCheck = LagCheck.candidate
    rt_semantics: RtSemantics = RtSemantics.paper
    backlog_includes_lag: bool = False
    K: int = time_field(0)  # replay window for B; 0 = the runtime's checkpoint interval (code: 10)
    update_overlap: bool = False
    workload_metric: str = "exact"  # exact | ewma1m
    post_rescale_pause_s: float = time_field(0.0)  # Kafka Streams in the code: 200

    def validate(self) -> None:
        for key in ("loop_s", "rt_target_s", "horizon_s", "fast_history_s", "fallback_horizon_s"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{key}: must be > 0, got {getattr(self, key)}")
        if self.max_scaleout < 1:
            raise ValueError(f"max_scaleout: must be >= 1, got {self.max_scaleout}")
        for key in ("grace_s", "keep_s", "warmup_s", "K", "post_rescale_pause_s", "initial_replicas"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}: must be >= 0, got {getattr(self, key)}")
        if self.downtime_out_s < 1 or self.downtime_in_s < 1:
            raise ValueError("downtime_out_s: downtimes must be >= 1 s, got "
                             f"{self.downtime_out_s}/{self.downtime_in_s}")
        if self.workload_metric not in ("exact", "ewma1m"):
            raise ValueError(f"workload_metric: must be exact or ewma1m, got {self.workload_metric!r}")
        if self.initial_replicas > self.max_scaleout:
            raise ValueError(f"initial_replicas: must be <= max_scaleout ({self.max_scaleout})")

    def controller(self, name: str = "daedalus", max_scaleout: Optional[int] = None) -> DaedalusController:
        top = max_scaleout or self.max_scaleout
        return DaedalusController(
            settings=DecisionSettings(max_scaleout=top, grace_s=self.grace_s, keep_s=self.keep_s,
                                      rt_target_s=self.rt_target_s, lag_check=LagCheck(self.lag_check),
                                      rt_semantics=RtSemantics(self.rt_semantics),
                                      backlog_includes_lag=self.backlog_includes_lag),
            capacity=CapacityModel(max_scaleout=top, welford=WelfordMode(self.welford),
                                   skew_rule=SkewRule(self.skew_rule)),
            forecaster=Forecaster(mode=ForecastMode(self.forecast_mode), horizon=self.horizon_s,
                                  fallback_horizon=self.fallback_horizon_s, history_s=self.fast_history_s,
                                  update_overlap=self.update_overlap,
                                  counter=RetrainCounter(threshold=self.retrain_threshold, repeat=self.retrain_repeat)),
            warmup_s=self.warmup_s, K_s=self.K, workload_metric=self.workload_metric,
            downtime_out=self.downtime_out_s, downtime_in=self.downtime_in_s,
            post_rescale_pause_s=self.post_rescale_pause_s, name=name)


@register_policy("daedalus", DaedalusParams, billing="rebill", placement="first_fit")
class DaedalusPolicy(Policy):
    name = "daedalus"

    def __init__(self, params: DaedalusParams, placement: Optional[Placement] = None):
        self.params = params
        self.placement = placement
        self.interval_s = params.loop_s
        self.controllers: Dict[str, DaedalusController] = {}

    def initial_parallelism(self, max_scaleout: int) -> Optional[int]:
        return self.params.initial_replicas or None

    def run_details(self) -> dict:
        """What the manifest records about this run's controllers (forecasting mode and counters)."""
        return {"forecast_mode": self.params.forecast_mode.value if hasattr(self.params.forecast_mode, "value")
                else str(self.params.forecast_mode),
                "fast_history_s": self.params.fast_history_s,
                "retrains": {n: c.forecaster.counter.retrains for n, c in self.controllers.items()},
                "model_fits": {n: c.forecaster.fits for n, c in self.controllers.items()},
                "orders": {n: (list(c.forecaster.model.order) if c.forecaster.model is not None else None)
                           for n, c in self.controllers.items()}}

    def records(self) -> Dict[str, Dict[str, list]]:
        out: Dict[str, Dict[str, list]] = {}
        for c in self.controllers.values():
            for table, cols in c.records.items():
                dst = out.setdefault(table, {k: [] for k in cols})
                for k, v in cols.items():
                    dst[k].extend(v)
        return out

    def decide(self, snapshot: Snapshot) -> List[Action]:
        from testbed.policies.operator_mode import daedalus_operator_actions

        return daedalus_operator_actions(self, snapshot)

    def decide_job(self, s: JobSnapshot) -> List[Action]:
        c = self.controllers.get(JOB_OPERATOR)
        if c is None:
            c = self.controllers[JOB_OPERATOR] = self.params.controller(JOB_OPERATOR,
                                                                        min(self.params.max_scaleout, s.max_scaleout))
        out = c.loop(LoopWindow(t=s.t, p_cur=s.parallelism, lag=s.lag, checkpoint_s=s.checkpoint_s, seconds=s.seconds,
                                workload=s.workload, throughput=s.throughput, cpu=s.cpu, uptime=s.uptime))
        target = target_of(JOB_OPERATOR, s.parallelism, out.target, out.reason)
        return [] if target is None else [target]
