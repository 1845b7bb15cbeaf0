"""What the worker reads off a toy session besides the step."""

from __future__ import annotations

from membench.backends import Readings


class ToyReadings(Readings):
    def model_sizes(self) -> dict[str, float]:
        params = float(sum(w.nbytes for w in self.session.model.values()))
        return {"parameter_bytes": params, "gradient_bytes": params}

    def framework_notes(self) -> dict[str, object]:
        return {"device": "cpu"}
