"""The capacity search under an SLO, its probes and its record."""
