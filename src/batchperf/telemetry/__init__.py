"""Machine state during a cell: the sampler, the one NVML reader, GPU health, SM clocks, the loopback capture."""
