"""Regressions: fingerprint, gate, baseline store, compare, refresh, history."""
