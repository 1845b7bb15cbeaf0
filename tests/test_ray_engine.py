"""The ray engine on a real two-node Ray cluster on this machine, against the fake framework.

One cluster serves the module: a head and a second node, each started with `ray start
--block` in its own process group (so stopping a node is killing its group), one CPU each and
the smallest object store. Tests compare the ray engine's records with the local engine's,
show cells spread over both nodes, a lost node's cell retried elsewhere and then `error`,
and a SIGTERM'd run that cancels its cells and keeps the finished ones.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from membench.capacity.search import capacity, search_in_parallel  # noqa: E402
from membench.capacity.search_steps import budget_for  # noqa: E402
from membench.cells.engines import LocalEngine  # noqa: E402
from membench.cells.engines.ray_engine import RayEngine  # noqa: E402
from membench.cells.supervision import RunControl  # noqa: E402
from membench.records import RecordStore  # noqa: E402

from .conftest import REPO  # noqa: E402
from .test_runner import fake_cell, fake_cli_run  # noqa: E402

RAY = str(Path(sys.executable).with_name("ray"))
OBJECT_STORE = str(75 * 2**20)  # Ray's minimum: the records are all that travel
FORWARD = "FAKE_BEHAVIOUR,FAKE_STEP_SECONDS,FAKE_COUNTER,FAKE_MARK"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """One `ray start --block` process group: stopping the node kills the group."""

    def __init__(self, *args: str, resource: str = "membench_node"):
        cmd = [RAY, "start", "--block", "--num-cpus=1", "--disable-usage-stats",
               f"--object-store-memory={OBJECT_STORE}", f"--resources={json.dumps({resource: 1})}",
               *args]  # fmt: skip
        self.log = tempfile.NamedTemporaryFile(prefix="mbray-node-", suffix=".log")
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.id: str | None = None

    def stop(self) -> None:
        """As a machine is lost: its Ray processes killed at once (Ray's workers follow)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        self.log.close()


def _wait_for_node(node: Node, resource: str, known: set[str], timeout: float = 60) -> str:
    """The id of the new alive node offering resource (`ray start`'s output if none came)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and node.proc.poll() is None:
        for n in ray.nodes():
            if n["Alive"] and n["NodeID"] not in known and n["Resources"].get(resource):
                return n["NodeID"]
        time.sleep(0.2)
    output = Path(node.log.name).read_text(errors="replace")[-3000:]
    raise TimeoutError(f"no new node with {resource} within {timeout} s: {output}")


@pytest.fixture(scope="module")
def cluster():
    """(address, engine, nodes): a head and a second node, both offering membench_node."""
    # A cluster of this machine only, for this module: no token to share between its nodes,
    # the driver and the CLI runs the tests start.
    auth = pytest.MonkeyPatch()
    auth.setenv("RAY_AUTH_MODE", "disabled")
    temp = tempfile.mkdtemp(prefix="mbray-")  # short: Ray's socket paths must fit 107 bytes
    port = _free_port()
    address = f"127.0.0.1:{port}"
    head = Node("--head", f"--port={port}", f"--temp-dir={temp}", "--include-dashboard=false")
    nodes = [head]
    engine = RayEngine(address)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the head node never listened"
                time.sleep(0.3)
        engine.connect()
        head.id = _wait_for_node(head, "membench_node", set())
        second = Node(f"--address={address}")
        nodes.append(second)
        second.id = _wait_for_node(second, "membench_node", {head.id})
        yield address, engine, nodes
    finally:
        engine.close()
        for node in reversed(nodes):
            node.stop()
        auth.undo()


@pytest.fixture
def forwarded(fake_framework, monkeypatch):
    """The fake framework's settings reach the workers on the nodes."""
    monkeypatch.setenv("MEMBENCH_FORWARD_ENV", FORWARD)
    return monkeypatch


def _shape(record) -> tuple:
    env = {k for k in record.environment if k != "placement"}
    return (record.status, sorted(record.metrics), len(record.step_times), sorted(env))


@pytest.mark.parametrize(
    "behaviour,status", [("count", "ok"), ("hang", "timeout"), ("crash", "error"), ("oom", "oom")]
)
def test_fake_cells_end_as_they_do_on_the_local_engine(
    cluster, forwarded, tmp_path, behaviour, status
):
    _, engine, _ = cluster
    forwarded.setenv("FAKE_BEHAVIOUR", behaviour)
    cell = fake_cell()
    control = RunControl(timeout=4)
    local = LocalEngine().run([cell], RecordStore(tmp_path / "local"), control).records[0]
    store = RecordStore(tmp_path / "ray")
    remote = engine.run([cell], store, control).records[0]
    assert local.status == remote.status == status, (local.reason, remote.reason)
    assert _shape(remote) == _shape(local)
    assert remote.reason.split(";")[0] == local.reason.split(";")[0]
    assert store.get(cell).to_dict() == remote.to_dict()  # the driver wrote the store
    assert store.log_path(cell).exists()  # and the worker's log came back
    placement = remote.environment["placement"]
    assert placement["attempts"] == 1 and placement["reservation"] == "whole node"
    assert placement["node"]["hostname"] == socket.gethostname()


def test_cells_spread_over_both_nodes_and_each_record_names_its_node(cluster, forwarded, tmp_path):
    _, engine, nodes = cluster
    forwarded.setenv("FAKE_BEHAVIOUR", "count")
    forwarded.setenv("FAKE_STEP_SECONDS", "0.3")
    cells = [fake_cell("baseline", b) for b in (1, 2, 3)] + [fake_cell("infer", 1)]
    flights: list[dict] = []
    result = engine.run(cells, RecordStore(tmp_path / "s"), RunControl(on_flight=flights.append))
    assert [r.status for r in result.records] == ["ok"] * 4
    assert [r.cell for r in result.records] == cells  # in the order asked, like local runs
    used = {r.environment["placement"]["node"]["ray_node_id"] for r in result.records}
    assert used == {n.id for n in nodes}
    assert max(len(f) for f in flights) == 2  # one cell per node at a time, never more
    assert all(len(set(f.values())) == len(f) for f in flights)  # never two on one node
    for record in result.records:
        node = record.environment["placement"]["node"]
        assert node["hostname"] == socket.gethostname()
        assert node["machine"] == record.environment["machine"]


def test_cells_per_node_shares_nodes_and_the_records_say_so(cluster, forwarded, tmp_path):
    address, _, _ = cluster
    forwarded.setenv("FAKE_BEHAVIOUR", "count")
    shared = RayEngine(address, cells_per_node=2)
    shared.connect()  # the module's connection, with this engine's reservation
    record = shared.run([fake_cell()], RecordStore(tmp_path / "s")).records[0]
    assert record.status == "ok"
    assert record.environment["placement"]["cells_per_node"] == 2
    assert record.environment["placement"]["reservation"] == "1/2 of a node (shared)"


def test_a_rerun_keeps_the_finished_records(cluster, forwarded, tmp_path):
    _, engine, _ = cluster
    counter = tmp_path / "built"
    forwarded.setenv("FAKE_BEHAVIOUR", "count")
    forwarded.setenv("FAKE_COUNTER", str(counter))
    store = RecordStore(tmp_path / "s")
    cells = [fake_cell("baseline", b) for b in (1, 2)]
    first = engine.run(cells[:1], store)
    second = engine.run(cells, store)
    assert (first.measured, second.measured, second.reused) == (1, 1, 1)
    assert sorted(counter.read_text().split("\n")[:-1]) == ["baseline 1", "baseline 2"]


def test_a_lost_node_is_retried_on_another_then_error(cluster, forwarded, tmp_path):
    """Two nodes offering their own resource take the cell; each is stopped mid-cell."""
    address, _, _ = cluster
    forwarded.setenv("FAKE_BEHAVIOUR", "count")
    forwarded.setenv("FAKE_STEP_SECONDS", "1")  # the orphaned worker ends within seconds
    doomed: list[Node] = []
    try:
        for _ in range(2):  # one after the other: nodes starting at once race for file names
            doomed.append(Node(f"--address={address}", resource="doomed"))
            doomed[-1].id = _wait_for_node(doomed[-1], "doomed", {n.id for n in doomed[:-1]})
        engine = RayEngine(address, resource="doomed")
        engine.connect()
        flights: list[dict] = []
        out: list = []
        retried: list[tuple] = []
        run = threading.Thread(
            target=lambda: out.append(
                engine.run(
                    [fake_cell()],
                    RecordStore(tmp_path / "s"),
                    RunControl(
                        on_flight=flights.append,
                        on_retry=lambda cell, why: retried.append((cell, why, list(out))),
                    ),
                )
            )
        )
        run.start()
        stopped = []
        for _ in doomed:
            deadline = time.monotonic() + 60
            while not (flights and flights[-1]):  # the cell (re)started somewhere
                assert time.monotonic() < deadline, "the cell never started"
                time.sleep(0.05)
            label = next(iter(flights[-1].values()))
            node = next(n for n in doomed if n.id.startswith(label.split("/")[1]))
            flights.clear()
            node.stop()
            stopped.append(node.id)
        run.join(timeout=120)
        assert not run.is_alive()
    finally:
        for node in doomed:
            node.stop()
    record = out[0].records[0]
    assert record.status == "error"
    assert record.reason.startswith("node lost twice while measuring: attempt 1 on ")
    assert "attempt 2 on " in record.reason and "NodeDiedError" in record.reason
    assert len(set(stopped)) == 2  # the retry ran on the other node
    placement = record.environment["placement"]
    assert placement["attempts"] == 2 and len(placement["lost"]) == 2
    # the resubmission was announced as it happened (before the run ended), once
    ((cell, why, finished_then),) = retried
    assert cell == fake_cell() and why == placement["lost"][0] and finished_then == []


def _workers_with(marker: str) -> list[int]:
    """Measurement workers (not Ray's idle workers) whose environment holds marker."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                not proc.name.isdigit()
                or b"membench.measure.worker" not in (proc / "cmdline").read_bytes()
            ):
                continue
            if marker.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            pass
    return found


@pytest.mark.quiet_host  # once exited 1, not 143, on a loaded host: its timing wants a quiet one
def test_sigterm_cancels_the_cells_in_flight_and_keeps_finished_ones(
    cluster, fake_framework, tmp_path
):
    address, _, _ = cluster
    marker = f"FAKE_MARK={uuid.uuid4()}"  # finds this run's workers, wherever they run
    store_dir = tmp_path / "store"
    env = dict(os.environ, FAKE_BEHAVIOUR="count", FAKE_STEP_SECONDS="0.5",
               MEMBENCH_FORWARD_ENV=FORWARD, FAKE_MARK=marker.split("=")[1])  # fmt: skip
    cmd = fake_cli_run(store_dir, "-s", "baseline,infer", "--engine", "ray", "--address", address)
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 120
    while not list(store_dir.glob("*.json")):
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "no cell finished"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "run the same command again to resume" in " ".join(out.split())
    kept = list(store_dir.glob("*.json"))
    assert 1 <= len(kept) < 6
    assert all(json.loads(p.read_text())["status"] == "ok" for p in kept)
    time.sleep(1)
    assert _workers_with(marker) == []  # no worker left running on any node


def test_capacity_searches_run_at_once_on_both_nodes(cluster, forwarded, tmp_path):
    _, engine, nodes = cluster
    forwarded.setenv("FAKE_BEHAVIOUR", "per-sample")
    forwarded.setenv("FAKE_MIB_PER_SAMPLE", "50")
    forwarded.setenv("MEMBENCH_FORWARD_ENV", FORWARD + ",FAKE_MIB_PER_SAMPLE")
    budget = budget_for("cpu", 200 * 2**20)
    store = RecordStore(tmp_path / "probes")
    combos = [("fake-work", "fake", "baseline"), ("fake-work", "fake", "infer")]

    def search(w, f, s, engine):
        return capacity(w, f, s, "smoke", budget, store, None, 16, 0, engine=engine)

    results = search_in_parallel(combos, search, engine, tmp_path / "c.json", lambda i, r: None)
    assert [(r.strategy, r.status) for r in results] == [("baseline", "ok"), ("infer", "ok")]
    for result in results:  # ~50 MiB a sample over a ~25 MiB interpreter: 3 fit, 4 do not
        assert (result.largest_fit, result.smallest_non_fit) == (3, 4)
        assert [p["batch_size"] for p in result.probes] == [1, 2, 4, 3]
    used = {r.environment["placement"]["node"]["ray_node_id"] for r in store.records()}
    assert used == {n.id for n in nodes}


def test_cluster_without_the_node_resource_is_refused_with_how_to(cluster, forwarded, tmp_path):
    from membench.cells.engines import EngineError

    address, _, _ = cluster
    engine = RayEngine(address, resource="no_such_resource")
    engine.connect()
    with pytest.raises(EngineError, match="--resources"):
        engine.run([fake_cell()], RecordStore(tmp_path / "s"))
