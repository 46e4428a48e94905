"""Job mode on a real Apache Flink in reactive mode (`backend=flink`, testbed/flink and
testbed/live/flink_job.py): one TaskManager of one slot per worker. Its settings are `backend.flink`,
its times compressed by `backend.flink.time_compression`; each workload runs on its own job
(`backend.flink.jobs`); its runs are named `<configuration>-flink`."""
from __future__ import annotations

from typing import Any

from testbed.arguments import ConfigError
from testbed.backend_registry import Backend, RunInputs, register_backend
from testbed.job_config import FlinkJobConfig
from testbed.run_result import RunResult


@register_backend("flink", FlinkJobConfig, key="flink", modes=("job",), suffix="-flink", shares_machine=True)
class Flink(Backend):
    def validate(self, cfg: Any) -> None:
        problem = cfg.backend.flink.validate() or cfg.backend.flink.validate_workload(cfg.pattern.name)
        if problem is not None:
            raise ConfigError(*problem)

    def time_compression(self, cfg: Any) -> float:
        return float(cfg.backend.flink.time_compression)

    def run(self, run: RunInputs) -> RunResult:
        from testbed.live.flink_job import FlinkJobRun

        return FlinkJobRun(run.cfg, run.policy, run.pattern, run.run_id, run.run_dir).run()
