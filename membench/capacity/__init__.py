"""Capacity: the largest batch within a memory budget. The search, guided by the memory model
(search), JAX's guess from its compiled step (compiled_guess), a preset's searches run and
forecast (run), and the calibration cells that fit the model (calibrate).

May import: the foundation, the registry, the memory model and the cells layer; never publish
or the commands.
"""
