"""Workloads: the arrival patterns (active machines or event rates over time) and the sensor payloads
of the machines, shared by the simulator and the live provider (data_provider)."""
