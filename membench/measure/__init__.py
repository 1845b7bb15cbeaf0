"""Measuring one cell, inside its own process: the worker's protocol (import, build, first
step, warm-up, the measured steps, the record; membench.measure.worker), a cell's ranks
(distributed) and what the probes themselves cost (probe_overhead).

May import: the foundation, the registry, backends, instruments and the memory model (a
record carries its prediction); never the layers that run cells or publish them.
"""
