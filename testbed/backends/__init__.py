"""Backends: what runs a run (the simulator, the live testbed, Apache Flink, or a plug-in), each one
module that registers itself with the registry (testbed/backend_registry.py)."""
