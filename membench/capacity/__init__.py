"""Capacity: the largest batch within a memory budget. The search, guided by the memory model
(search), JAX's guess from its compiled step (compiled_guess), and a preset's searches run and
forecast (run). (The calibration cells that fit the model are `membench calibrate`'s:
membench.commands.calibrate.)

May import: the foundation, the registry, the memory model and the cells layer; never publish
or the commands.
"""
