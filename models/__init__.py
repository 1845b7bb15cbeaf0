"""Workload architectures: a framework-neutral spec per workload, one module per framework."""
