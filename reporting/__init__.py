"""Turns event-log folders into the paper's comparison tables (reads only event logs)."""
