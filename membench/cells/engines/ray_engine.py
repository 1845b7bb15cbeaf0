"""The ray engine: the cells of a run spread over the nodes and GPUs of a Ray cluster.

Each cell is one Ray task that runs today's worker (worker_launch.run_worker: a fresh process, the
same protocol and endings) on the node Ray picked. The task reserves what one measurement
needs: one GPU where the cluster has GPUs (Ray sets CUDA_VISIBLE_DEVICES), else a whole node,
through the per-node resource `membench_node` (1 per node; a cell takes 1/cells_per_node).
The task first yields where it runs, then the record and the worker's log; the driver writes
the store, so nodes share no file system. The driver's checkout is shipped to the nodes
(Ray's working_dir), so every node measures the driver's code; each node brings its own
Python environment with the frameworks (scripts/install.sh).

A cell whose node (or Ray worker) is lost is submitted once more, away from that node; a
second loss ends it as `error`. Ctrl-C or SIGTERM cancels the tasks in flight (their workers
are killed) and keeps the finished records.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeLabelSchedulingStrategy, NotIn

from membench import settings
from membench.cells import planning, supervision, termination, worker_launch
from membench.cells.engines.contract import EngineError, node_label
from membench.cells.supervision import DEFAULT_CONTROL, RunControl, resume_cap
from membench.environment import REPO_ROOT, git_commit, machine_name
from membench.instruments.probes import nvml_device_info
from membench.records import Cell, Record, RecordStore

NODE_RESOURCE = "membench_node"
NODE_ID_LABEL = "ray.io/node-id"
# Environment the tasks get from the driver: membench's own settings, and the names listed
# in MEMBENCH_FORWARD_ENV. Nothing else: paths and CUDA settings belong to each node.
FORWARD_LIST = "MEMBENCH_FORWARD_ENV"
# The checkout minus what the nodes never need (records, asv's environments, history).
SHIPPED_EXCLUDES = [
    ".git", ".asv", ".membench", ".venv", "results", "report", "__pycache__", "*.pyc",
    ".pytest_cache", ".ruff_cache",
]  # fmt: skip
LOG_LIMIT_CHARS = 1_000_000  # a worker's log comes back whole unless it is huge
POLL_SECONDS = 1.0
LOCAL_OBJECT_STORE_BYTES = 100 * 2**20  # records and logs only; Ray's minimum is 75 MiB


def forwarded_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    names = set(settings.value(FORWARD_LIST, environ) or [])
    return {k: v for k, v in environ.items() if k.startswith("MEMBENCH_") or k in names}


def node_identity() -> dict[str, Any]:
    """Where this task runs: host, machine name, Ray node and, on GPUs, the GPU it holds."""
    context = ray.get_runtime_context()
    identity: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "machine": machine_name(),
        "ray_node_id": context.get_node_id(),
        "ip": ray.util.get_node_ip_address(),
    }
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        identity["cuda_visible_devices"] = visible
        gpu = nvml_device_info()
        if gpu:
            identity["gpu_index"], identity["gpu_uuid"] = gpu["gpu_index"], gpu["gpu_uuid"]
    return identity


def _measure_on_node(
    cell_data: dict, timeout: float, options: worker_launch.WorkerOptions
) -> Iterator[dict[str, Any]]:
    """The task: say where it runs, then measure the cell in a fresh worker process, with the
    run's options (a memory cap not given: the node's default)."""
    yield node_identity()
    cell = Cell.from_dict(cell_data)
    with tempfile.TemporaryDirectory(prefix="membench-cell-") as folder:
        log, timeline = Path(folder) / "cell.log", Path(folder) / "timelines" / "cell.parquet"
        record = worker_launch.run_worker(
            cell, log, timeout, timeline if options.timeline else None, options=options
        )
        text = log.read_text(errors="replace") if log.exists() else ""
        # the timeline travels with the record (tens of kB) to the driver's store
        sampled = timeline.read_bytes() if timeline.exists() else None
    yield {"record": record.to_dict(), "log": text[-LOG_LIMIT_CHARS:], "timeline": sampled}


def _keep_timeline(store: RecordStore, record: Record, data: bytes) -> None:
    """A node's timeline file written into the driver's store (under a temporary name, then
    renamed), under the name the record's store gives it; where it cannot be written the
    record keeps why, and the run goes on."""
    path = store.timeline_path(record.cell)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        record.environment.pop("timeline", None)
        record.environment["timeline_error"] = f"{type(exc).__name__}: {exc}"
        return
    if isinstance(record.environment.get("timeline"), dict):
        record.environment["timeline"]["file"] = f"{path.parent.name}/{path.name}"


@dataclass
class _Flight:
    """One cell's task: its attempts, and the node of the current one once it started."""

    cell: Cell
    index: int
    attempt: int = 1
    node: dict[str, Any] | None = None
    lost: list[str] = field(default_factory=list)


def _first_sentence(exc: BaseException) -> str:
    text = str(exc).strip().split(". ")[0]
    return f"{type(exc).__name__}: {text}"


# Ray's own log lines (its driver-side warnings and notices) go here, not into the run's
# output; the nodes' logs stay in Ray's session folders, each cell's worker log in its store.
RAY_LOG = Path(".membench") / "ray.log"


def logs_to_file(path: Path) -> None:
    """Send the "ray" logger to path alone: ray.init sets its level and format but keeps the
    handlers it finds, and nothing propagates to the console."""
    path.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger("ray")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.addHandler(logging.FileHandler(path))
    logger.propagate = False


class RayEngine:
    """Cells as Ray tasks; see the module docstring for what each task reserves."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        cells_per_node: int = 1,
        resource: str = NODE_RESOURCE,
        num_cpus: int | None = None,
    ):
        if cells_per_node < 1:
            raise ValueError(f"cells per node must be at least 1, got {cells_per_node}")
        self.address = address  # None: start a one-node Ray on this machine
        self.cells_per_node = cells_per_node
        self.resource = resource
        self.num_cpus = num_cpus  # of the one-node Ray started here (default: all cores)
        self._started = False
        self._remote: Any = None
        self._reservation: dict[str, Any] = {}
        self._stopping = threading.Event()

    # -- the cluster -------------------------------------------------------------------
    def connect(self) -> None:
        """Join the cluster (or start one on this machine) with this checkout as the code;
        a connection this process already holds is used as it is."""
        self._remote = ray.remote(num_returns="streaming", max_retries=0)(_measure_on_node)
        if ray.is_initialized():
            return
        shipped = {"working_dir": str(REPO_ROOT), "excludes": SHIPPED_EXCLUDES}
        logs_to_file(RAY_LOG)
        options: dict[str, Any] = {
            "runtime_env": shipped,
            "log_to_driver": False,  # each worker's log comes back with its record
            "logging_level": logging.WARNING,
        }
        if self.address is None:
            # Ray's own memory monitor would kill a task whose worker fills the host, before
            # the worker's out-of-memory ending can be recorded: leave that to membench.
            os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
            options.update(
                num_cpus=self.num_cpus,
                resources={NODE_RESOURCE: 1},
                include_dashboard=False,
                object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            )
        else:
            options["address"] = self.address
        ray.init(**options)
        self._started = True

    def stop(self) -> None:
        self._stopping.set()

    def close(self) -> None:
        if self._started:
            ray.shutdown()
            self._started = False

    def reservation(self) -> dict[str, Any]:
        """What each task asks Ray for: a GPU where the cluster has GPUs, else a node."""
        if ray.cluster_resources().get("GPU", 0) > 0:
            return {"num_cpus": 0, "num_gpus": 1}
        if ray.cluster_resources().get(self.resource, 0) <= 0:
            raise EngineError(
                f"no node of the cluster offers the resource {self.resource!r}: start each "
                f"node with ray start ... --resources '{{\"{self.resource}\": 1}}'"
            )
        return {"num_cpus": 0, "resources": {self.resource: 1 / self.cells_per_node}}

    def _submit(self, cell: Cell, control: RunControl, env: dict, avoid: str | None) -> Any:
        options = {**self._reservation, "runtime_env": {"env_vars": env}}
        if avoid:  # a retry: any node but the one that was lost
            options["scheduling_strategy"] = NodeLabelSchedulingStrategy(
                hard={NODE_ID_LABEL: NotIn(avoid)}
            )
        task = self._remote.options(**options)
        limit = supervision.cell_timeout(cell, control.timeout)
        return task.remote(dataclasses.asdict(cell), limit, control.worker)

    def _placement(self, flight: _Flight) -> dict[str, Any]:
        """What the record says about where and how it ran."""
        on_gpu = "num_gpus" in self._reservation
        placement: dict[str, Any] = {
            "engine": "ray",
            "node": flight.node or {},
            "attempts": flight.attempt,
            "reservation": "one GPU" if on_gpu else "whole node",
        }
        if not on_gpu:
            placement["cells_per_node"] = self.cells_per_node
            if self.cells_per_node > 1:
                placement["reservation"] = f"1/{self.cells_per_node} of a node (shared)"
        if flight.lost:
            placement["lost"] = list(flight.lost)
        return placement

    # -- the run -----------------------------------------------------------------------
    def run(
        self, cells: Iterable[Cell], store: RecordStore, control: RunControl = DEFAULT_CONTROL
    ) -> supervision.RunResult:
        """supervision.run's contract, with the cells measured in parallel on the cluster; a cell
        whose node was lost is resubmitted to another once, and on_retry says so then."""
        cells = list(cells)
        if ranked := [c.key for c in cells if c.world_size > 1]:
            raise EngineError(
                f"cells of several ranks ({', '.join(ranked[:3])}) need W devices reserved "
                "together on one node, which the ray engine does not do: run them with "
                "--engine local"
            )
        if control.deadline is not None:  # every cell is submitted at once: none could be held back
            raise EngineError("a deadline (membench plan) needs --engine local")
        self.connect()
        self._reservation = self.reservation()
        cells = list(cells)
        records: dict[int, Record] = {}
        result = supervision.RunResult([], 0, 0)
        env = forwarded_env()
        flights: dict[Any, _Flight] = {}
        in_flight: dict[Cell, str] = {}
        # The driver's code runs on the nodes (working_dir), so the driver's commit names it.
        commit = git_commit()

        def finish(record: Record, flight: _Flight) -> None:
            if "git" in record.environment:  # the shipped copy has no .git to ask
                record.environment["git"] = commit
            record.environment["placement"] = self._placement(flight)
            store.put(record)
            records[flight.index] = record
            result.measured += 1
            if control.on_done:
                control.on_done(record, False)

        def moved(flight: _Flight) -> None:
            if in_flight.pop(flight.cell, None) is not None and control.on_flight:
                control.on_flight(dict(in_flight))

        for index, cell in enumerate(cells):
            existing = planning.reusable_record(
                cell, store, control.fresh, control.retry_failed, resume_cap(control, self.name)
            )
            if existing:
                records[index] = existing
                result.reused += 1
                if control.on_done:
                    control.on_done(existing, True)
                continue
            if reason := planning.declared_refusal(cell):  # no task for what the backend refuses
                records[index] = refused = planning.refused_record(
                    cell, reason, control.worker.worker_env()
                )
                store.put(refused)
                result.measured += 1
                if control.on_done:
                    control.on_done(refused, False)
                continue
            flights[self._submit(cell, control, env, None)] = _Flight(cell, index)

        signals = len(termination.received)
        with termination.terminate_as_interrupt():
            try:
                while flights:
                    if self._stopping.is_set():
                        raise KeyboardInterrupt("the run was stopped")
                    termination.raise_if_terminated(signals)
                    ready, _ = ray.wait(list(flights), num_returns=1, timeout=POLL_SECONDS)
                    for task in ready:
                        flight = flights.pop(task)
                        try:
                            value = ray.get(next(task))
                        except ray.exceptions.RayTaskError as exc:  # the task's own code
                            moved(flight)
                            finish(Record(flight.cell, "error", _first_sentence(exc)), flight)
                            continue
                        except ray.exceptions.OutOfMemoryError as exc:  # Ray's monitor
                            moved(flight)
                            reason = f"host memory ran out: Ray's memory monitor ({exc})"
                            finish(Record(flight.cell, "oom", reason[:2000]), flight)
                            continue
                        except (ray.exceptions.RayError, StopIteration) as exc:
                            moved(flight)
                            retry = self._lost(flight, exc, control, env)
                            if retry is None:
                                why = "; ".join(flight.lost)
                                reason = f"node lost twice while measuring: {why}"
                                finish(Record(flight.cell, "error", reason), flight)
                            else:
                                flights[retry] = flight
                                in_flight.pop(flight.cell, None)
                                if control.on_retry:
                                    control.on_retry(flight.cell, flight.lost[-1])
                            continue
                        if flight.node is None:  # the task started: where it runs
                            flight.node = value
                            flights[task] = flight
                            in_flight[flight.cell] = node_label(value)
                            if control.on_start:
                                control.on_start(flight.cell, flight.index, len(cells))
                            if control.on_flight:
                                control.on_flight(dict(in_flight))
                            continue
                        moved(flight)
                        record = Record.from_dict(value["record"])
                        log = store.log_path(flight.cell)
                        log.parent.mkdir(parents=True, exist_ok=True)
                        log.write_text(value["log"])
                        if value.get("timeline"):
                            _keep_timeline(store, record, value["timeline"])
                        finish(record, flight)
            except BaseException:
                self._cancel(flights)
                raise
        result.records = [records[i] for i in sorted(records)]
        return result

    def _lost(
        self, flight: _Flight, exc: BaseException, control: RunControl, env: dict
    ) -> Any | None:
        """Note a lost attempt; the retry's task, or None once the retry was lost too."""
        where = node_label(flight.node) if flight.node else "a node (before it started)"
        flight.lost.append(f"attempt {flight.attempt} on {where}: {_first_sentence(exc)}")
        if flight.attempt >= 2:
            return None
        avoid = flight.node["ray_node_id"] if flight.node else None
        flight.attempt, flight.node = flight.attempt + 1, None
        return self._submit(flight.cell, control, env, avoid)

    @staticmethod
    def _cancel(flights: Mapping[Any, _Flight]) -> None:
        """Cancel tasks in flight; without force, the task's KeyboardInterrupt lets
        run_worker kill the worker's process group before the task ends."""
        for task in flights:
            try:
                ray.cancel(task)
            except Exception:  # already finished or its node gone: nothing to cancel
                pass
        deadline = time.monotonic() + 10
        for task in flights:  # each ends once its worker was killed
            while (left := deadline - time.monotonic()) > 0:
                ready, _ = ray.wait([task], num_returns=1, timeout=left)
                try:
                    ray.get(next(task)) if ready else None
                except (Exception, StopIteration):
                    break
                if not ready:
                    break
