"""Engine selection and the pieces of the ray engine that need no cluster."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from membench.cells.engines import LocalEngine, engine_for
from membench.cells.progress import in_flight_text
from membench.cli import main
from membench.instruments import probes
from membench.records import Cell

from .test_probes import FakeNvml


class TwoGpuNvml(FakeNvml):
    """Two GPUs, index i with UUID GPU-i."""

    def __init__(self):
        super().__init__([], itertools.repeat(0))

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return int(uuid.removeprefix("GPU-"))

    def nvmlDeviceGetIndex(self, handle):
        return handle

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle}"

    def nvmlDeviceGetName(self, handle):
        return "Fake GPU"

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=0, total=80 * 2**30)

    def nvmlSystemGetDriverVersion(self):
        return "1.0"


@pytest.mark.parametrize(
    "visible,index", [(None, 0), ("1", 1), ("1,0", 1), ("GPU-1", 1), ("", None), ("-1", None)]
)
def test_the_gpu_nvml_reads_is_the_one_cuda_visible_devices_shows(monkeypatch, visible, index):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert probes.visible_gpu_index(TwoGpuNvml()) == index
    info = probes.nvml_device_info(TwoGpuNvml())
    if index is None:  # every GPU hidden: the process runs on the CPU
        assert info is None
    else:
        assert (info["gpu_index"], info["gpu_uuid"], info["gpu_count"]) == (
            index,
            f"GPU-{index}",
            2,
        )


def test_nvml_reader_refuses_when_every_gpu_is_hidden(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(RuntimeError, match="hides every GPU"):
        probes.NvmlReader(nvml=TwoGpuNvml())


def test_progress_names_the_cells_in_flight_per_node():
    cells = [Cell("w", "f", "s", b, "smoke") for b in (1, 2, 3)]
    flying = dict(zip(cells, ["vm/b023dc", "vm/9a1f00:gpu1", "vm/b023dc"], strict=True))
    assert in_flight_text(flying) == "3 in flight: vm/9a1f00:gpu1 x1, vm/b023dc x2"
    assert in_flight_text({}) == "none in flight"


def test_local_is_the_default_engine_and_unknown_ones_are_refused():
    assert isinstance(engine_for("local"), LocalEngine)
    with pytest.raises(ValueError, match="valid: local, ray"):
        engine_for("slurm")


def test_forwarded_env_is_membench_settings_and_the_listed_names():
    pytest.importorskip("ray")
    from membench.cells.engines.ray_engine import forwarded_env

    env = {"MEMBENCH_PLUGINS": "p", "MEMBENCH_FORWARD_ENV": "FOO", "FOO": "1", "BAR": "2",
           "CUDA_VISIBLE_DEVICES": "0"}  # fmt: skip
    assert forwarded_env(env) == {
        "MEMBENCH_PLUGINS": "p",
        "MEMBENCH_FORWARD_ENV": "FOO",
        "FOO": "1",
    }


@pytest.mark.parametrize(
    "argv,message",
    [
        (["versions", "--engine", "ray"], "measures each cell under every release"),
        (["run", "--address", "auto"], "need --engine ray"),
        (["run", "--cells-per-node", "2"], "need --engine ray"),
    ],
)
def test_cli_refuses_engine_options_that_do_not_apply(argv, message, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in " ".join((captured.out + captured.err).split())


def test_cells_per_node_must_be_positive(capsys):
    assert main(["run", "--engine", "ray", "--cells-per-node", "0"]) == 2
    assert "must be a positive integer" in capsys.readouterr().err


def _record_on(machine: str, batch: int, status: str = "ok"):
    from membench.records import Record

    host = {"machine": machine, "platform": "Linux", "cpu": f"{machine} cpu", "cpu_count": 32,
            "host_memory_bytes": 64 * 2**30}  # fmt: skip
    return Record(Cell("fake-work", "fake", "baseline", batch, "smoke"), status, environment=host)


def test_a_cluster_bench_records_asv_results_per_node_machine(monkeypatch, tmp_path):
    """Cells measured on two kinds of node: one asv run for each, described from the node."""
    from types import SimpleNamespace

    from membench.cells.supervision import RunResult
    from membench.commands import bench as bench_command
    from membench.commands import store_guard
    from membench.publish import asv_run as bench
    from membench.records import Record

    lost = Record(Cell("fake-work", "fake", "baseline", 3, "smoke"), "error", "node lost twice")
    records = [_record_on("gpu-a", 1), _record_on("gpu-b", 2), _record_on("gpu-a", 3), lost]
    stub = SimpleNamespace(
        name="ray", connect=lambda: None, close=lambda: None,
        run=lambda *a, **k: RunResult(records, len(records), 0),
    )  # fmt: skip
    monkeypatch.setattr(store_guard, "engine_for", lambda *a: stub)
    calls = []
    monkeypatch.setattr(bench, "run_asv", lambda env, regexes, host=None: calls.append(host) or 0)
    monkeypatch.setattr(bench_command, "print_table", lambda *a: None)
    argv = ["bench", "--engine", "ray", "-w", "resnet50", "-f", "torch", "-s", "baseline",
            "-p", "smoke", "-b", "1", "--store", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    assert [h["machine"] for h in calls] == ["gpu-a", "gpu-b"]
    describe, run = bench.asv_commands("gpu-b", "abc", calls[1])
    assert describe[describe.index("--cpu") + 1] == "gpu-b cpu"
    assert describe[describe.index("--ram") + 1] == "64GB"
    assert run[run.index("--machine") + 1] == "gpu-b"


def test_asv_for_one_node_machine_reads_only_its_cells_and_measures_none(
    monkeypatch, tmp_path, fake_framework
):
    from membench.publish import asv_suite
    from membench.records import RecordStore

    store = RecordStore(tmp_path)
    store.put(_record_on("gpu-a", 1))
    store.put(_record_on("gpu-b", 2))
    monkeypatch.setenv("MEMBENCH_STORE", str(tmp_path))
    monkeypatch.setenv("MEMBENCH_PRESET", "smoke")
    monkeypatch.setenv(asv_suite.RECORDS_OF, "gpu-a")
    assert asv_suite.cell_record("fake-work", "fake", "baseline", 1).environment["machine"] == (
        "gpu-a"
    )
    for batch in (2, 3):  # measured on the other machine; measured nowhere
        with pytest.raises(NotImplementedError, match="not measured on gpu-a"):
            asv_suite.cell_record("fake-work", "fake", "baseline", batch)
    assert len(list(tmp_path.glob("*.json"))) == 2  # nothing was measured here


def test_rays_own_log_lines_go_to_a_file_not_the_runs_output(tmp_path, capfd):
    import logging

    pytest.importorskip("ray")
    from membench.cells.engines.ray_engine import logs_to_file

    logger = logging.getLogger("ray")
    saved = (list(logger.handlers), logger.propagate)
    try:
        logs_to_file(tmp_path / "ray.log")
        logging.getLogger("ray._private.runtime_env.working_dir").warning("packaging notice")
        for handler in logger.handlers:
            handler.flush()
        assert "packaging notice" in (tmp_path / "ray.log").read_text()
        out, err = capfd.readouterr()
        assert "packaging notice" not in out + err
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
        for handler in saved[0]:
            logger.addHandler(handler)
        logger.propagate = saved[1]


def test_bench_hands_its_world_size_to_asv(monkeypatch, tmp_path):
    """`bench --world-size N`: asv's regexes and its cells' filter get N (after the command
    split the selection given to asv once lost it, and asv took the preset's ranks)."""
    from types import SimpleNamespace

    from membench.cells.supervision import RunResult
    from membench.commands import bench as bench_command
    from membench.commands import store_guard
    from membench.publish import asv_run as bench

    stub = SimpleNamespace(
        name="local", connect=lambda: None, close=lambda: None,
        run=lambda *a, **k: RunResult([], 0, 0),
    )  # fmt: skip
    monkeypatch.setattr(store_guard, "engine_for", lambda *a: stub)
    monkeypatch.setattr(bench_command, "print_table", lambda *a: None)
    seen = []
    monkeypatch.setattr(bench, "run_asv", lambda env, regexes, host=None: seen.append(env) or 0)
    argv = ["bench", "-p", "cpu-shard", "-w", "transformer", "-f", "torch", "-s", "ddp",
            "--world-size", "2", "--no-capacity", "--store", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    assert [env["MEMBENCH_WORLD_SIZE"] for env in seen] == ["2"]


def test_a_signal_whose_exception_a_finaliser_swallowed_still_ends_a_polling_loop():
    """SIGTERM while a finaliser runs (Ray's ObjectRefGenerator.__del__): Python prints
    "Exception ignored" and goes on, so the engine's loop asks between its waits whether a
    signal came since it began, and raises it then."""
    import gc

    import pytest

    from membench.cells import termination

    class Finalised:
        def __del__(self):
            termination._raise_terminated(15, None)  # the handler, run inside a finaliser

    since = len(termination.received)
    try:
        termination.raise_if_terminated(since)  # nothing received: goes on
        Finalised()
        gc.collect()  # the exception was ignored: nothing raised here
        with pytest.raises(termination.Terminated) as raised:
            termination.raise_if_terminated(since)
        assert raised.value.signum == 15
    finally:
        del termination.received[since:]
