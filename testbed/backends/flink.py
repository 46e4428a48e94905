"""Job mode on a real Apache Flink in reactive mode (`backend=flink`, testbed/flink and
testbed/live/flink_job.py): one TaskManager of one slot per worker. Its settings are `backend.flink`,
its times compressed by `backend.flink.time_compression`; each workload runs on its own job
(`backend.flink.jobs`); its runs are named `<configuration>-flink`."""
from __future__ import annotations

from typing import Any

from testbed.arguments import ConfigError
from testbed.backend_registry import Backend, RunInputs, register_backend
from testbed.job_config import PER_VERTEX, FlinkJobConfig
from testbed.run_result import RunResult


@register_backend("flink", FlinkJobConfig, key="flink", modes=("job",), suffix="-flink", shares_machine=True)
class Flink(Backend):
    def validate(self, cfg: Any) -> None:
        problem = cfg.backend.flink.validate() or cfg.backend.flink.validate_workload(cfg.pattern.name)
        if problem is not None:
            raise ConfigError(*problem)
        if cfg.backend.flink.parallelism == PER_VERTEX:
            check_per_vertex(cfg)

    def time_compression(self, cfg: Any) -> float:
        return float(cfg.backend.flink.time_compression)

    def run(self, run: RunInputs) -> RunResult:
        from testbed.live.flink_job import FlinkJobRun

        return FlinkJobRun(run.cfg, run.policy, run.pattern, run.run_id, run.run_dir).run()


def check_per_vertex(cfg: Any) -> None:
    """Per-vertex mode runs only policies that decide per vertex: ConfigError naming the key and the
    first configuration whose policy decides one parallelism."""
    from testbed.experiment import configurations
    from testbed.policies.contract import decides_per_vertex
    from testbed.policies.registry import policies

    known = policies()
    able = sorted(name for name, entry in known.items() if decides_per_vertex(entry.cls))
    for conf in configurations(cfg):
        entry = known.get(conf.policy)
        if entry is not None and not decides_per_vertex(entry.cls):
            raise ConfigError("backend.flink.parallelism", f"per-vertex needs a policy that decides each vertex's "
                                                           f"parallelism ({', '.join(able)}); configuration "
                                                           f"{conf.name!r} (policy {conf.policy}) decides one for the "
                                                           f"whole job: use reactive, or evaluation.only=[...]")
