"""Torch's weights in a Jittor model: every Jittor model module keeps torch's names and layouts,
so a torch state_dict loads name for name (the parity tests)."""

from __future__ import annotations

from typing import Any


def from_torch(state: dict[str, Any]) -> dict[str, Any]:
    """A torch model's state_dict (numpy arrays) as the Jittor model's: every model module keeps
    torch's names and layouts; torch's BatchNorm step counter has no Jittor counterpart."""
    import numpy as np

    return {
        name: np.ascontiguousarray(value, dtype=np.float32)
        for name, value in state.items()
        if not name.endswith("num_batches_tracked")
    }


def load_torch_state(model: Any, state: dict[str, Any]) -> None:
    """Copy a torch model's state_dict into its Jittor twin, refusing any name or shape
    mismatch (Jittor's load_state_dict would skip them)."""
    converted = from_torch(state)
    own = model.state_dict()
    if set(own) != set(converted):
        missing, extra = set(own) - set(converted), set(converted) - set(own)
        raise KeyError(f"state names differ: missing {sorted(missing)}, extra {sorted(extra)}")
    for name, value in converted.items():
        if tuple(own[name].shape) != value.shape:
            raise ValueError(f"{name}: shape {value.shape}, model has {tuple(own[name].shape)}")
    model.load_state_dict(converted)
