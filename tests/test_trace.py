"""--trace: one more step under each framework's own memory view, after the measured steps."""

import gzip
import subprocess
from pathlib import Path
from types import SimpleNamespace

from membench.cells import supervision, worker_launch
from membench.records import Cell

from .test_runner import fake_cell, fake_cli_run

TRACE = worker_launch.WorkerOptions(trace=True)  # --trace
TRACED = supervision.RunControl(timeout=60, worker=TRACE)


def test_a_framework_without_a_view_says_so_and_its_cell_is_measured(
    fake_framework, store, monkeypatch
):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "count")
    record = supervision.run([fake_cell()], store, TRACED).records[0]
    assert record.status == "ok", record.reason
    assert record.environment["traces"] == {
        "unavailable": "FakeSession offers no memory view of its own"
    }


def _fake_traced(store, monkeypatch, view: str):
    """The fake cell measured with FAKE_TRACE=view; its record, whole."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "count")
    monkeypatch.setenv("FAKE_TRACE", view)
    record = supervision.run([fake_cell()], store, TRACED).records[0]
    assert record.status == "ok" and len(record.step_times) == 3
    return record


def test_a_view_is_written_by_a_worker_of_its_own_after_the_measured_one(
    fake_framework, store, monkeypatch
):
    files = _fake_traced(store, monkeypatch, "write").environment["traces"]["files"]
    assert files == {"the fake view": "traces/fake-work--fake--baseline--bs1.fake-view.txt"}
    # its own worker: the first step, then the view's (not the measured cell's 1 + warm-up + 3)
    assert (store.root / files["the fake view"]).read_text() == "steps 2"
    assert not list(store.root.rglob("*.trace.json"))


def test_a_view_whose_worker_dies_leaves_the_measured_record_whole(
    fake_framework, store, monkeypatch
):
    record = _fake_traced(store, monkeypatch, "crash")
    assert record.environment["traces"] == {
        "error": "the view's worker ended with status -9 without a result"
    }
    assert store.get(fake_cell()).environment["traces"] == record.environment["traces"]


def test_trace_with_the_ray_engine_is_refused_before_any_work(fake_framework, tmp_path):
    done = subprocess.run(
        fake_cli_run(tmp_path, "--trace", "--engine", "ray"), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--trace runs with the local engine only" in done.stderr
    assert not list(tmp_path.glob("*.json"))


def _view(store, framework: str) -> tuple[str, Path]:
    record = supervision.run(
        [Cell("transformer", framework, "baseline", 2, "smoke")],
        store,
        supervision.RunControl(worker=TRACE),
    ).records[0]
    assert record.status == "ok", record.reason
    files = record.environment["traces"]["files"]
    assert len(files) == 1
    ((what, name),) = files.items()
    assert name.startswith("traces/transformer--") and (store.root / name).stat().st_size > 0
    assert len(record.step_times) == 3  # the view ran in a worker of its own
    return what, store.root / name


def test_torch_on_a_cpu_writes_its_profilers_memory_timeline(store):
    what, path = _view(store, "torch")
    assert "memory timeline" in what and path.suffix == ".html"
    assert "data:image/png;base64" in path.read_text()


def test_jax_writes_its_device_memory_profile(store):
    what, path = _view(store, "jax")
    assert "device memory profile" in what and path.name.endswith(".device-memory.prof")
    assert len(gzip.decompress(path.read_bytes())) > 0  # pprof: a gzipped protocol buffer


def test_jittor_writes_its_peak_memory_report(store):
    what, path = _view(store, "jittor")
    assert "peak memory" in what
    assert "100.00%" in path.read_text()  # the root of the tree: the whole peak


def test_torch_on_cuda_records_the_steps_history_then_dumps_and_stops(tmp_path):
    """The CUDA branch's order, without a GPU: recording on, the step, the snapshot, off."""
    from membench.backends.torch_backend import TorchSession
    from membench.backends.torch_backend.readings import TorchReadings

    calls = []
    memory = SimpleNamespace(
        _record_memory_history=lambda **kw: calls.append(("record", kw)),
        _dump_snapshot=lambda path: calls.append(("dump", Path(path).name)),
    )
    session = TorchSession.__new__(TorchSession)
    session.torch = SimpleNamespace(cuda=SimpleNamespace(memory=memory))
    session.device = SimpleNamespace(type="cuda")
    session.step = lambda: calls.append(("step",))
    files = TorchReadings(session).trace_step(tmp_path / "cell")
    assert calls == [
        ("record", {"max_entries": 200_000}), ("step",),
        ("dump", "cell.cuda-memory-snapshot.pickle"), ("record", {"enabled": None}),
    ]  # fmt: skip
    assert list(files.values()) == ["cell.cuda-memory-snapshot.pickle"]
