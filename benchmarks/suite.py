"""asv benchmarks, generated from membench's registry: the whole suite whatever a run selects.
One class per preset and workload (Resnet50_cpu, Transformer_smoke, ...) over framework x
strategy x batch size of the cells that preset runs, and one capacity class per preset and
workload with declared budgets (Resnet50Capacity_cpu_capacity) over framework x strategy x
budget (MiB), which records `membench capacity`; a set of the product that no run measures is
asv's skip_params (never run).

See membench/publish/asv_suite.py for what each track_ method reports and how cells are shared.
"""

import sys
from pathlib import Path

# asv strips PYTHONPATH: put this checkout first, so that the suite is this checkout's
# registry even where another checkout of membench is the one installed.
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "membench").is_dir():
    sys.path.insert(0, str(_CHECKOUT))

from membench.publish.asv_suite import benchmark_classes, capacity_classes  # noqa: E402

globals().update(benchmark_classes())
globals().update(capacity_classes())
