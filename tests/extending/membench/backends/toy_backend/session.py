"""The toy session: build and the step primitives the template asks of a framework."""

from __future__ import annotations

from typing import Any

from membench.backends.toy_backend.readings import ToyReadings
from membench.backends.toy_backend.support import SUPPORT

from membench.backends import Session, model_module


class ToySession(Session):
    support = SUPPORT
    readings_class = ToyReadings

    def build(self) -> None:
        self.module = module = model_module(self.spec.workload, "toy")
        inputs = dict(self.spec.size.inputs)
        self.model = module.build(inputs)
        self.optimizer = module.make_optimizer()
        self.batches = [module.synthetic_batch(self.spec.batch_size, inputs, self.spec.seed)]

    def train_step(self) -> None:
        for x, y in self.batches:
            self.module.step(self.model, self.optimizer, x, y)

    def infer(self, model: Any = None, length: int | None = None) -> None:
        x, _ = self.batches[0]
        self.output = self.module.forward(model or self.model, x[:, :length])
