"""The live data provider: emits a workload (testbed.workloads) to the broker, as a process of its
own or in a thread of a live run."""
