"""GPU memory predicted on a host without a GPU, by each framework's own machinery: torch's
fake tensors with CUDA's allocator replayed, XLA compiled for the card's target (the backends'
gpu_prediction modules); the cards (cards.py), the run of a framework's predictor (run.py),
the process's overhead from the GPU records (overhead.py), a card's capacity (capacity.py).
Every prediction is stored with the commit that made it (results/predictions/), so each later
GPU record tests one made before it.

It may import the registry, the backends' declarations (each framework's predictor module and
environment), records, paths and the environment; never a framework: each predictor runs in a
process of its own under the interpreter that has what it needs (run.py)."""
