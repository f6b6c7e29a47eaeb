"""Child processes: the suite's pytest command and the one way to wait for it, process groups, servers, the A/B round coordinator."""
