"""Arrival patterns and sensor payloads, shared by the simulator and the live provider."""
