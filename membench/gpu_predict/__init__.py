"""GPU memory predicted on a host without a GPU, by each framework's own machinery: torch's
fake tensors with CUDA's allocator replayed, XLA compiled for the card's target (the backends'
gpu_prediction modules); the cards (cards.py), the run of a framework's predictor (run.py),
the process's overhead from the GPU records (overhead.py), a card's capacity (capacity.py).
Every prediction is stored with the commit that made it (results/predictions/), so each later
GPU record tests one made before it."""
