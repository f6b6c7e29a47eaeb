"""What a cell sends: the workload spec, synthetic prompts, shared prefixes, trace files, tenants."""
