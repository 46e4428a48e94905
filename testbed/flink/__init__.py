"""Apache Flink as a job-mode engine (docs/flink.md): a standalone application cluster in reactive
mode running the project's WordCount job, its TaskManagers started and stopped from Python, its
metrics read from the REST API and the Prometheus reporter. Imports nothing above testbed's core."""
