"""A PyTorch cell's GPU memory predicted on a host without a GPU: the suite's own session
(TorchSession: its model module, optimizer, batch and strategy code) built and stepped under
torch's fake tensors on the CPU device, every tensor storage's birth and death recorded, and the
sequence replayed through the CUDA caching allocator's rules (caching_allocator.py).

    python -m membench.backends.torch_backend.gpu_prediction '<request as JSON>'

prints one JSON line (membench.gpu_predict reads it). The request holds the cell and the card
({"cell": {...}, "card": {"compute_capability": [9, 0], "memory_bytes": ..., "limit_bytes":
null}}).

What CUDA does differently from the CPU trace, and what is done about it:
  - autocast casts other operators on CUDA: CUDA's policy is applied (cuda_autocast.py);
  - optimizers run their foreach (multi-tensor) implementation on CUDA, the for-loop on a CPU:
    foreach is set, so the step's temporaries are CUDA's;
  - every block is a multiple of 512 bytes, and the caching allocator keeps freed blocks in
    segments (the reserve): the replay applies both;
  - cuBLAS keeps a workspace per handle through the caching allocator (32 MiB from compute
    capability 9.0, else 8 MiB and 128 KiB: torch's default CUBLAS_WORKSPACE_CONFIG), allocated
    at the first matrix product and held: added at the step's first event;
  - not modelled, so part of the error the validation states: cuDNN's convolution workspaces
    (chosen by timing kernels on the device), cuDNN batch norm's reserve, SDPA's CUDA kernels'
    own buffers, and the first step's autotuning.
The process figure (CUDA context, library handles) is not torch's to trace: the caller adds it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from membench.metrics import ANALYTIC_FLOOR_BYTES

CUBLAS_WORKSPACE_HOPPER = 32 << 20  # ":4096:8" from compute capability 9.0
CUBLAS_WORKSPACE_OLDER = (4096 << 10) * 2 + (16 << 10) * 8  # ":4096:2:16:8"
STEPS = 3  # the first step (optimizer state created), then steady steps


def cublas_workspace_bytes(compute_capability: tuple[int, int]) -> int:
    """cuBLAS's workspace torch allocates per handle (and stream) by default."""
    return CUBLAS_WORKSPACE_HOPPER if compute_capability[0] >= 9 else CUBLAS_WORKSPACE_OLDER


class StorageEvents:
    """Every storage's birth (its bytes) and death, in order, as the step makes them: a
    dispatch mode above fake tensors sees each operator's outputs; a weak reference per new
    storage reports its death."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.events: list[tuple[str, int, int]] = []  # ("alloc"|"free", handle, bytes)
        self._seen: Any = torch.utils.weak.WeakIdKeyDictionary()
        self._refs: dict[int, Any] = {}
        self._next = 0

    def adopt(self, tensor: Any) -> None:
        """Record a tensor's storage if it is new (outputs, and tensors made outside dispatch)."""
        torch = self.torch
        if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta":
            return
        storage = tensor.untyped_storage()
        if storage in self._seen:
            return
        handle = self._next
        self._next += 1
        self._seen[storage] = handle
        self.events.append(("alloc", handle, storage.nbytes()))
        self._refs[handle] = weakref.ref(storage, lambda _, h=handle: self._died(h))

    def _died(self, handle: int) -> None:
        self._refs.pop(handle, None)
        self.events.append(("free", handle, 0))

    def mark(self, name: str) -> None:
        self.events.append((name, -1, 0))

    def mode(self) -> Any:
        from torch.utils._python_dispatch import TorchDispatchMode

        events = self

        class Recording(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
                out = func(*args, **(kwargs or {}))
                for t in events.torch.utils._pytree.tree_leaves(out):
                    events.adopt(t)
                return out

        return Recording()


def replay(
    events: list[tuple[str, int, int]],
    workspace: int,
    expandable: bool,
    limit: int | None = None,
) -> dict[str, int]:
    """The events through the caching allocator: the steady steps' allocated peak and the whole
    run's reserved peak (a limit: the allocator's cap, as set_per_process_memory_fraction sets
    it; passing it is an out-of-memory, reported as 'oom_at_step')."""
    from membench.backends.torch_backend.caching_allocator import CachingAllocator, OutOfMemory

    alloc = CachingAllocator(expandable_segments=expandable, limit=limit)
    step = 0
    peaks = {1: 0, 2: 0}  # the first step's, the steady steps'
    out: dict[str, int] = {}
    try:
        for kind, handle, nbytes in events:
            if kind == "alloc":
                alloc.alloc(handle, nbytes)
            elif kind == "free":
                if handle in alloc.handles:  # a death recorded after its birth's replay
                    alloc.free(handle)
            elif kind == "step":
                step += 1
                if step == 1 and workspace:  # cuBLAS's workspace, from the first product on
                    alloc.alloc(-1, workspace)
            if step:
                phase = min(step, 2)
                peaks[phase] = max(peaks[phase], alloc.allocated)
    except OutOfMemory:
        out["oom_at_step"] = step
    out.update(
        allocated_bytes=peaks[2],
        first_step_allocated_bytes=peaks[1],
        reserved_bytes=alloc.peak_reserved,
    )
    return out


def trace_cell(cell: Any) -> tuple[list[tuple[str, int, int]], dict[str, object]]:
    """The cell's session built and stepped STEPS times under fake tensors on the CPU device,
    with CUDA's autocast and foreach optimizers; the storage events and what was set."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from membench.backends import BuildSpec, Unsupported, workload_refusal
    from membench.backends.torch_backend.backend import TorchBackend
    from membench.backends.torch_backend.cuda_autocast import CudaAutocastOnCpu
    from membench.backends.torch_backend.session import TorchSession

    spec = BuildSpec.of(cell)
    if reason := TorchBackend().refusal(spec, "cuda") or workload_refusal(spec):
        raise Unsupported(reason)
    if reason := untraceable(spec):
        raise Unsupported(reason)
    events = StorageEvents(torch)
    notes: dict[str, object] = {}
    with (
        CudaAutocastOnCpu(torch).installed(),
        _modules_stay_put(torch),
        FakeTensorMode(allow_non_fake_inputs=True) as fake,
        events.mode(),
    ):
        session = TorchSession(spec, "cpu")
        # the batch was made from numpy outside dispatch: on the GPU it is a device copy
        session.batches = [tuple(fake.from_tensor(t) for t in xy) for xy in session.batches]
        for t in _live_tensors(session):
            events.adopt(t)
        if session.optimizer is not None:
            for group in session.optimizer.param_groups:
                group["foreach"] = True  # CUDA's default; a CPU tensor's is the for-loop
            notes["optimizer"] = "foreach (CUDA's default)"
        if session.scaler is not None:
            # GradScaler reads its inf check back with .item(), which fake tensors cannot
            # answer; its in-place unscale allocates one float per device
            session.scaler = None
            notes["grad_scaler"] = "not traced: its unscale is in place (no allocation)"
        events.mark("built")
        for _ in range(STEPS):
            events.mark("step")
            session.step()
        events.mark("end")
        # what the records' activation figure subtracts: parameters, gradients, optimizer state
        notes[ANALYTIC_FLOOR_BYTES] = session.static_metrics()[ANALYTIC_FLOOR_BYTES]
    return events.events, notes


@contextmanager
def _modules_stay_put(torch: Any) -> Iterator[None]:
    """Module.to(cpu) as a no-op: under fake tensors it makes new parameters and cannot swap
    them in (fake tensors are weakly referenced), and the model is on the CPU already;
    Module.to(memory_format=...) re-lays the parameters' data instead (_relaid)."""
    original = torch.nn.Module.to

    def to(module: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and set(kwargs) == {"memory_format"}:  # channels-last: the same bytes
            return _relaid(module, kwargs["memory_format"])
        device = args[0] if args else kwargs.get("device")
        if len(args) + len(kwargs) == 1 and torch.device(device).type == "cpu":
            return module
        return original(module, *args, **kwargs)

    torch.nn.Module.to = to
    try:
        yield
    finally:
        torch.nn.Module.to = original


def _relaid(module: Any, layout: Any) -> Any:
    """Module.to(memory_format=layout) as fake tensors allow it: each 4D or 5D parameter's
    data re-laid in place of the old (Module._apply cannot swap fake parameters), as the GPU
    holds them: a copy of the same bytes, the old one freed."""
    dims = 5 if "3d" in str(layout) else 4
    for p in module.parameters():
        if p.dim() == dims:
            p.data = p.data.contiguous(memory_format=layout)
    return module


def untraceable(spec: Any) -> str | None:
    """Why a cell's step cannot be traced with fake tensors on a CPU (None: it can)."""
    s = spec.strategy
    if s.compile:
        return (
            "torch.compile's Inductor kernels and their buffer reuse exist only once compiled "
            "for the device"
        )
    if s.precision == "half":
        return (
            "model.half() cannot swap fake parameters in place (Module._apply under fake tensors)"
        )
    if spec.world_size > 1 or s.sharding != "none":
        return "a sharded step needs its ranks' process group"
    if s.data == "host" or s.models != "one" or s.hygiene_every:
        return "the advice strategies' host copies and collector calls are not traced"
    return None


def _live_tensors(session: Any) -> list[Any]:
    tensors = [t for xy in session.batches for t in xy]
    for model in session.models:
        tensors += list(model.parameters()) + list(model.buffers())
    return tensors


def traced_events(cell: Any, batch: int) -> tuple[list[tuple[str, int, int]], dict[str, object]]:
    """trace_cell at another batch size (the rest of the cell unchanged)."""
    from dataclasses import replace

    return trace_cell(replace(cell, batch_size=batch))


def scaled(
    low: list[tuple[str, int, int]], high: list[tuple[str, int, int]], b_low: int, b_high: int
) -> Any:
    """The events at any batch from two traces of one step sequence: each storage's bytes are
    linear in the batch (a fixed part, weights and their state, plus a part per sample), so two
    traces give both parts of every storage. None where the sequences differ."""
    if len(low) != len(high) or any(
        (a[0], a[1]) != (b[0], b[1]) for a, b in zip(low, high, strict=True)
    ):
        return None
    span = b_high - b_low

    def at(batch: int) -> list[tuple[str, int, int]]:
        out = []
        for (kind, handle, n_low), (_, _, n_high) in zip(low, high, strict=True):
            per = (n_high - n_low) / span
            out.append((kind, handle, max(0, round(n_low + per * (batch - b_low)))))
        return out

    return at


def search(
    cell: Any,
    targets: list[tuple[int, int]],
    expandable: bool,
    max_batch: int,
    step: int,
) -> list[dict[str, Any]]:
    """Per target (an allocator limit and the card's cuBLAS workspace), the largest batch (a
    multiple of step, at most max_batch) whose replay under the limit runs out of nothing. Two
    traces give every storage's bytes at any batch (scaled), the batch is bisected on replays,
    and a third trace, at the largest answer's next batch, checks the scaling: exact there,
    the scaled events stand; else every answer and its next batch are traced in full and
    stepped. The traces serve every target: only replays differ."""
    # batch 1 may take other kernels' shapes (a matmul folds a batch of one away): 2 and 4 steps
    b_low, b_high = 2 * step, 4 * step
    full: dict[int, list[tuple[str, int, int]]] = {}

    def traced(batch: int) -> list[tuple[str, int, int]]:
        if batch not in full:
            full[batch] = traced_events(cell, batch)[0]
        return full[batch]

    at = scaled(traced(b_low), traced(b_high), b_low, b_high)
    top = max_batch // step

    def fits_on(events: list[tuple[str, int, int]], limit: int, ws: int) -> bool:
        return "oom_at_step" not in replay(events, ws, expandable, limit)

    # bisect each target on the scaled events (or full traces where the steps do not scale)
    found = []
    for limit, ws in targets:
        events = at if at is not None else traced
        lo, hi = 0, top  # in steps: lo fits (0: nothing known to)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits_on(events(mid * step), limit, ws) else (lo, mid - 1)
        found.append(lo)
    # one full trace checks the scaling: where it gives every storage's bytes exactly at the
    # largest answer's next batch, the scaled events are the traced ones and every answer
    # stands; else each answer and its next batch are traced in full and stepped
    exact = False
    if at is not None and found:
        check = min(top, max(found) + 1) * step
        exact = traced(check) == at(check)
    answers = []
    for (limit, ws), lo in zip(targets, found, strict=True):
        events = at if exact else traced
        if not exact:
            while lo > 0 and not fits_on(traced(lo * step), limit, ws):
                lo -= 1
            while lo < top and fits_on(traced((lo + 1) * step), limit, ws):
                lo += 1
        answer = lo * step
        out: dict[str, Any] = {"batch": answer, "limit_bytes": limit}
        for name, batch in (("at_answer", answer), ("next", answer + step)):
            if 0 < batch <= max_batch:
                out[name] = replay(events(batch), ws, expandable, limit)
        answers.append(out)
    for out in answers:
        out.update(traces=len(full), scaled=at is not None, scaling_checked_exact=exact)
    return answers


def predict(request: dict[str, Any]) -> dict[str, Any]:
    """The request's cell predicted (its allocated and reserved peaks), or with "search" the
    largest batch within the limit."""
    from membench.records import Cell
    from membench.registry import strategy

    cell = Cell.from_dict(request["cell"])
    card = request["card"]
    limit = request.get("limit_bytes")
    t0 = time.perf_counter()
    workspace = cublas_workspace_bytes(tuple(card["compute_capability"]))
    expandable = strategy(cell.strategy).allocator == "expandable-segments"
    if request.get("search"):
        s = request["search"]
        # several cards at once: [[limit, compute capability], ...]; else the request's card
        pairs = s.get("targets") or [[limit, card["compute_capability"]]]
        targets = [(int(lim), cublas_workspace_bytes(tuple(cc))) for lim, cc in pairs]
        out = {"answers": search(cell, targets, expandable, s["max_batch"], s.get("step", 1))}
    else:
        events, notes = trace_cell(cell)
        out = replay(events, workspace, expandable, limit)
        out[ANALYTIC_FLOOR_BYTES] = notes.pop(ANALYTIC_FLOOR_BYTES)
        out.update(notes=notes, events=sum(1 for e in events if e[0] == "alloc"))
    out.update(seconds=time.perf_counter() - t0, cublas_workspace_bytes=workspace)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("request", help='{"cell": {...}, "card": {...}} as JSON')
    args = parser.parse_args(argv)
    from membench.backends.answer_line import print_answer

    def version() -> str:
        import torch

        return torch.__version__

    return print_answer(lambda: predict(json.loads(args.request)), version)


if __name__ == "__main__":
    sys.exit(main())
