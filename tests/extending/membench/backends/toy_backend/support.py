"""What the toy backend runs for each knob value, and how."""

from __future__ import annotations

from membench.backends import Implemented, Support

BASELINE = "a numpy forward and a plain SGD update of the output layer"
SUPPORT: Support = {
    "mode": {"infer": Implemented("the numpy forward alone")},
}
