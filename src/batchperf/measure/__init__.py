"""Measuring: workloads, the client feed, the clock, traces, metrics, KV accounting, telemetry."""
