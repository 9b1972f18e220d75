"""The workload zoo: one YAML file per network (schema in sim/workload.py and docs/reference/workloads.md)."""
