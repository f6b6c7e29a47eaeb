"""Trace and numbers: the request trace, clock, metrics, SLO attainment, KV accounting, counters, the catalogue."""
