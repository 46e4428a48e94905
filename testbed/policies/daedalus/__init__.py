"""Daedalus (Pfister et al., ICPE 2024; docs/papers/daedalus.md): capacity model, forecast, recovery
time, Algorithm 1 and anomaly detection as pure modules; `policy` registers the `daedalus` policy."""
