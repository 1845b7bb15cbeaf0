"""asv benchmarks: one class per workload (Resnet50, ...), generated from membench's registry.

Parameters are framework x strategy x batch size of the preset in force; see
membench/asv_suite.py for what each track_ method reports and how cells are shared.
"""

from membench.asv_suite import benchmark_classes

globals().update(benchmark_classes())
