"""Reference loops: each framework's plain training and inference loop, with no harness.

`membench selfcheck` runs one beside the suite's cell for the same model, batch and size, each
in a fresh process, so that a framework that is slow only because of how the suite calls it
shows as a ratio. A loop takes the model module (build, synthetic batch, loss, optimizer) and
nothing else from membench: the step is the framework's own idiom, the timer a wall clock.
"""
