"""The jobs the cluster can run (flink/jobs/, docs/flink.md#the-jobs) and where each keeps what the
testbed reads: the operator that sees every record and pays its cost (its records in are the
throughput, its task's busy time the CPU reading), the keyed operator that counts what it admits
exactly once (with the latency), the vertex whose parallelism is the job's, and how many counted
units one source record makes. Pure data: the cluster, the metrics and the job-mode run take it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple


@dataclass(frozen=True)
class JobSpec:
    name: str
    job_class: str
    record: str  # what one source record is, for messages (sentence, ad event, vehicle report)
    work_operator: str  # first stage after the source: every record, its cost, the busy time read
    count_operator: str  # keyed stage: the exactly-once count of what it admits and the latency
    counted_gauge: str  # that operator's gauge of the count
    windows: bool  # results leave through event-time windows (gauge windowedRecords at the sink)
    units_per_word: bool  # a record counts as words_per_sentence units (WordCount), else as one

    @property
    def vertex(self) -> str:
        """The vertex (by its name's start) whose parallelism the cluster reads: the counting one."""
        return self.count_operator


WORDCOUNT = JobSpec("wordcount", "testbed.flink.wordcount.WordCountJob", "sentence", "count", "count",
                    "countedWords", windows=False, units_per_word=True)
YSB = JobSpec("ysb", "testbed.flink.ysb.YsbJob", "ad event", "parse", "count", "countedRecords",
              windows=True, units_per_word=False)
TRAFFIC = JobSpec("traffic", "testbed.flink.traffic.TrafficJob", "vehicle report", "parse", "speed",
                  "countedRecords", windows=True, units_per_word=False)
JOBS: Dict[str, JobSpec] = {j.name: j for j in (WORDCOUNT, YSB, TRAFFIC)}
JOB_NAMES: Tuple[str, ...] = tuple(JOBS)


def units_per_record(spec: JobSpec, words_per_sentence: int) -> int:
    """Counted units per source record: a sentence's words, or the record itself."""
    return words_per_sentence if spec.units_per_word else 1
