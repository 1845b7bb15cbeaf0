"""Instruments: the gauges every layer reads a process by. A process's memory now and at its
highest (probes), the phase marks a worker writes (marks), the runner's liveness line to its
worker (lifeline), a process group's memory cap and watch (memory_cap) and its memory sampled
over time (timeline).

May import: the standard library and the suite's foundation (membench.paths, metrics, records)
only; nothing that builds or runs a cell.
"""
