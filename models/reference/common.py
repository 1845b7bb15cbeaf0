"""What every reference loop shares: its command line and its wall-clock timer (no framework)."""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoopArgs:
    module: Any  # the workload's model module for this framework
    inputs: dict[str, int]
    batch: int
    mode: str  # train or infer
    accumulate: int
    warmup: int
    steps: int
    precision: str = "fp32"  # or amp-bf16: bfloat16 compute, float32 weights
    memory_format: str = "contiguous"  # or channels-last: a convnet's images and weights NHWC


class NotPlain(SystemExit):
    """A loop asked for what its framework has no plain way to do (the reason, exit 2)."""

    def __init__(self, why: str):
        print(json.dumps({"error": why}), flush=True)
        super().__init__(2)


def parse(argv: list[str] | None = None) -> LoopArgs:
    parser = argparse.ArgumentParser(description="a framework's plain loop, timed")
    parser.add_argument(
        "--module", required=True, help="model module, e.g. models.resnet50.torch_impl"
    )
    parser.add_argument("--inputs", required=True, help="the workload's inputs as JSON")
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--mode", choices=["train", "infer"], default="train")
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--precision", default="fp32", help="fp32 or amp-bf16")
    parser.add_argument("--memory-format", default="contiguous", help="or channels-last")
    a = parser.parse_args(argv)
    module = importlib.import_module(a.module)
    inputs = json.loads(a.inputs)
    return LoopArgs(
        module, inputs, a.batch, a.mode, a.accumulate, a.warmup, a.steps, a.precision,
        a.memory_format,
    )  # fmt: skip


def only(args: LoopArgs, precisions: tuple[str, ...], formats: tuple[str, ...], who: str) -> None:
    """Refuse (NotPlain) a precision or layout this loop has no plain way to run."""
    if args.precision not in precisions:
        raise NotPlain(f"{who}'s plain loop runs {', '.join(precisions)}, not {args.precision}")
    if args.memory_format not in formats:
        raise NotPlain(f"{who}'s plain loop lays images out one way only, not {args.memory_format}")


def split(array: Any, k: int) -> list[Any]:
    """k equal micro-batches along the first axis."""
    m = len(array) // k
    return [array[i * m : (i + 1) * m] for i in range(k)]


def time_steps(step: Callable[[], None], args: LoopArgs) -> None:
    """Warm up, time each step by the wall clock, print the result as one JSON line."""
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    result = {"step_seconds": times, "samples_per_second": args.batch / median}
    print(json.dumps(result), flush=True)
