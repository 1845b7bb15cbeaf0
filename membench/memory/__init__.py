"""The memory model: a step's peak predicted from the workload's spec and each framework's
fitted constants (memory_model), the calibration that fits them (calibration, with the
foundation's line fit, membench.fitting), and the prediction a record stores (predictions).

May import: the foundation and the registry; nothing that runs a cell (a worker imports this
layer, not the other way round).
"""
