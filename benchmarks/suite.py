"""asv benchmarks, generated from membench's registry: one class per workload (Resnet50, ...)
over framework x strategy x batch size of the preset in force, and one capacity class per
workload (Resnet50Capacity) over framework x strategy, which records `membench capacity`.

See membench/asv_suite.py for what each track_ method reports and how cells are shared.
"""

from membench.asv_suite import benchmark_classes, capacity_classes

globals().update(benchmark_classes())
globals().update(capacity_classes())
