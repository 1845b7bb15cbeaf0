"""Machines that mean one host kind: the name from the CPU's facts, asv's stable description
of a machine, and the migration of results stored under the earlier shared name."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from membench import environment as E
from membench.publish.asv_run import asv_commands
from membench.settings import SettingError
from scripts.migrations import migrate_machines as M

from .conftest import REPO

GIB = 2**30
OLD = "cpu-x86_64-2core-24gib"
AMD_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx avx2 avx512f avx512dq avx512_bf16 avx512_vnni avx_vnni sha_ni

processor\t: 1
vendor_id\t: AuthenticAMD
"""
INTEL_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8
"""


def host(cpuinfo: str, cpu: str, **more: object) -> dict[str, object]:
    return {"cpu": cpu, **E.parse_cpuinfo(cpuinfo), "cpu_count": 2,
            "host_memory_bytes": 24 * GIB + 123_456, **more}  # fmt: skip


def test_cpuinfo_gives_the_facts_that_decide_the_kernels():
    amd = E.parse_cpuinfo(AMD_CPUINFO)
    assert amd == {
        "cpu_vendor": "AuthenticAMD", "cpu_family": 26, "cpu_model_number": 2,
        "cpu_isa": ["avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni"],
    }  # fmt: skip
    assert "amx_tile" in E.parse_cpuinfo(INTEL_CPUINFO)["cpu_isa"]
    assert "amx_int8" not in E.parse_cpuinfo(INTEL_CPUINFO)["cpu_isa"]  # not one that matters


def test_two_cpu_models_get_their_own_names_and_the_same_facts_the_same_name():
    amd = host(AMD_CPUINFO, "AMD EPYC")
    intel = host(INTEL_CPUINFO, "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz")
    assert E.machine_for(amd) == "amd-epyc-f26m2-avx512bf16-2core-24gib"
    assert E.machine_for(intel) == "intel-xeon-platinum-8481c-f6m143-amx-2core-24gib"
    assert E.machine_for(dict(amd)) == E.machine_for(amd)
    # the kernel's build is no part of a host kind
    again = {**amd, "platform": "Linux-6.18.44-fc-v769-x86_64-with-glibc2.36"}
    assert E.machine_for(again) == E.machine_for(amd)
    older = {**amd, "cpu_isa": ["avx2", "avx512f"]}  # as a record's JSON holds it
    assert E.machine_for(older) == "amd-epyc-f26m2-avx512-2core-24gib"
    assert E.machine_for({**amd, "cpu_isa": []}).endswith("-f26m2-other-2core-24gib")


def test_a_record_without_the_cpus_facts_is_named_from_what_it_has():
    for cpu, name in [("AMD EPYC", "amd-epyc-2core-24gib"),
                      ("Intel(R) Xeon(R) Processor", "intel-xeon-2core-24gib")]:  # fmt: skip
        assert E.machine_for({"cpu": cpu, "cpu_count": 2, "host_memory_bytes": 24 * GIB}) == name


def test_gpu_machines_keep_their_form_and_membench_machine_overrides(monkeypatch):
    gpu = host(AMD_CPUINFO, "AMD EPYC", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1)
    gpu["cpu_count"] = 16
    assert E.machine_for(gpu) == "nvidia-h100-80gb-hbm3-x1-16core"
    monkeypatch.setenv("MEMBENCH_MACHINE", "my-box")
    assert E.machine_name() == "my-box"
    monkeypatch.setenv("MEMBENCH_MACHINE", "My Box")  # one rule for every machine name
    with pytest.raises(SettingError, match=r"not a machine name: 'My Box'.*\(e\.g\. 'my-box'\)"):
        E.machine_name()
    monkeypatch.delenv("MEMBENCH_MACHINE")
    assert E.machine_name() == E.machine_for(
        {"cpu": E.cpu_model(), **E.cpu_facts(), "cpu_count": os.cpu_count(),
         "host_memory_bytes": E.host_memory_bytes(), **(E.gpu_info() or {})}
    )  # fmt: skip


def test_records_carry_the_cpus_facts():
    env = E.host_environment()
    assert env["machine"] == E.machine_name() and env["arch"]
    if Path("/proc/cpuinfo").is_file() and "flags" in Path("/proc/cpuinfo").read_text():
        assert set(env["cpu_isa"]) <= set(E.ISA_FLAGS)
        assert {"cpu_vendor", "cpu_family", "cpu_model_number"} <= env.keys()


@pytest.mark.parametrize(
    "platform, expected",
    [
        ("Linux-6.18.44-fc-v657-x86_64-with-glibc2.36", "Linux x86_64 glibc2.36"),
        ("Linux-6.18.44-fc-v769-x86_64-with-glibc2.36", "Linux x86_64 glibc2.36"),
        ("Linux-5.15.0-1051-aws-aarch64-with-glibc2.35", "Linux aarch64 glibc2.35"),
        ("macOS-14.2-arm64-arm-64bit", "macOS arm64"),
        ("Linux x86_64 glibc2.36", "Linux x86_64 glibc2.36"),  # already stable
    ],
)
def test_the_os_loses_the_kernels_build(platform, expected):
    assert E.stable_os(platform) == expected


def test_asvs_description_is_the_same_on_every_host_of_one_kind():
    a = host(AMD_CPUINFO, "AMD EPYC", platform="Linux-6.18.44-fc-v657-x86_64-with-glibc2.36")
    b = {**a, "platform": "Linux-6.18.44-fc-v669-x86_64-with-glibc2.36", "python": "3.11.9"}
    assert E.asv_machine_fields(a) == E.asv_machine_fields(b) == {
        "arch": "x86_64", "cpu": "AMD EPYC", "num_cpu": "2", "os": "Linux x86_64 glibc2.36",
        "ram": "24GB",
    }  # fmt: skip


# -- asv's machine.json ---------------------------------------------------------------------
def _describe_and_record(machine: str, host_env: dict, root: Path, home: Path) -> Path:
    """What `membench bench` does to asv's machine: describe it, then asv's run writes
    results/asv/<machine>/machine.json from the description."""
    env = dict(os.environ, HOME=str(home))
    describe, _ = asv_commands(machine, "", host_env)
    subprocess.run(describe, cwd=root, env=env, check=True, capture_output=True)
    save = (
        "import sys; from asv.machine import Machine; "
        "Machine.load(machine_name=sys.argv[1], interactive=True).save(sys.argv[2])"
    )
    results = root / "results" / "asv"
    subprocess.run([sys.executable, "-c", save, machine, str(results)], env=env, check=True)
    return results / machine / "machine.json"


def test_describing_and_recording_again_leaves_machine_json_unchanged(tmp_path):
    pytest.importorskip("asv")
    root, home = tmp_path / "clone", tmp_path / "home"
    root.mkdir()
    home.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    first = host(AMD_CPUINFO, "AMD EPYC", platform="Linux-6.18.44-fc-v657-x86_64-with-glibc2.36")
    machine = E.machine_for(first)
    path = _describe_and_record(machine, first, root, home)
    # an older, fuller entry in ~/.asv-machine.json does not leak into the description
    entries = json.loads((home / ".asv-machine.json").read_text())
    entries[machine]["os"] = "Linux 6.18.44-fc-v657"
    (home / ".asv-machine.json").write_text(json.dumps(entries))
    subprocess.run([*git, "add", "."], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "described"], cwd=root, check=True)
    assert json.loads(path.read_text()) == {
        "arch": "x86_64", "cpu": "AMD EPYC", "machine": machine, "num_cpu": "2",
        "os": "Linux x86_64 glibc2.36", "ram": "24GB", "version": 1,
    }  # fmt: skip
    # a second host of the kind, another kernel build, described twice
    second = {**first, "platform": "Linux-6.18.44-fc-v769-x86_64-with-glibc2.36"}
    _describe_and_record(machine, second, root, home)
    _describe_and_record(machine, second, root, home)
    status = subprocess.run(
        ["git", "status", "--porcelain", "--", "results"], cwd=root, capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    assert status.stdout == ""


def test_each_committed_machine_json_is_its_records_hosts_description(tmp_path):
    """Describing a committed machine from one of its records reproduces its machine.json."""
    pytest.importorskip("asv")
    for committed in sorted((REPO / "results" / "asv").glob("*/machine.json")):
        machine = committed.parent.name
        envs = (
            json.loads(p.read_text()).get("environment") or {}
            for p in (REPO / "results" / "records" / machine).glob("*/*.json")
        )
        env = next((e for e in envs if "host_memory_bytes" in e), None)
        if env is None:
            continue
        root = tmp_path / machine
        root.mkdir()
        made = _describe_and_record(machine, env, root, tmp_path)
        assert made.read_bytes() == committed.read_bytes(), machine


# -- the migration ----------------------------------------------------------------------------
AMD_ENV = {"cpu": "AMD EPYC", "cpu_count": 2, "host_memory_bytes": 25_276_510_208,
           "platform": "Linux-6.18.44-fc-v657-x86_64-with-glibc2.36", "machine": OLD}  # fmt: skip
INTEL_ENV = {**AMD_ENV, "cpu": "Intel(R) Xeon(R) Processor",
             "platform": "Linux-6.18.44-fc-v769-x86_64-with-glibc2.36"}  # fmt: skip
AMD, INTEL = "amd-epyc-2core-24gib", "intel-xeon-2core-24gib"
A, B = "a" * 40, "b" * 40


def _record(path: Path, env: dict, peak: float = 123_456_789.0, status: str = "ok") -> None:
    cell = {"workload": "resnet50", "framework": "torch", "strategy": "baseline",
            "batch_size": int(path.stem.rsplit("bs", 1)[1]), "preset": "cpu"}  # fmt: skip
    metrics = {"peak_host_rss_bytes": peak}
    data = {"cell": cell, "status": status, "environment": env, "metrics": metrics}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True))


def _asv(path: Path, commit: str, os_: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    params = {"machine": OLD, "os": os_, "ram": "24GB", "python": "3.11"}
    results = {"suite.Resnet50_cpu.track_peak_host_rss": [[1.0]]}
    data = {"commit_hash": commit, "env_name": "checkout-py3.11", "params": params,
            "results": results, "version": 2}  # fmt: skip
    path.write_text(json.dumps(data))


@pytest.fixture
def old_results(tmp_path) -> Path:
    """A results tree under the shared name: an AMD and an Intel run, a store of both hosts,
    a calibration of the Intel host, a fairness check and asv's files."""
    r = tmp_path / "results"
    amd_store = r / "records" / OLD / f"cpu-{A[:12]}"
    _record(amd_store / "resnet50--torch--baseline--bs2.json", AMD_ENV, 1.5)
    (amd_store / "logs").mkdir()
    (amd_store / "logs" / "resnet50--torch--baseline--bs2.log").write_text("log\n")
    intel_store = r / "records" / OLD / f"cpu-{B[:12]}"
    _record(intel_store / "resnet50--torch--baseline--bs2.json", INTEL_ENV)
    _record(intel_store / "resnet50--torch--baseline--bs4.json", {}, status="timeout")
    mixed = r / "records" / OLD / f"smoke-{'c' * 12}"
    _record(mixed / "resnet50--torch--baseline--bs1.json", AMD_ENV)
    _record(mixed / "resnet50--torch--baseline--bs2.json", INTEL_ENV)
    _record(mixed / "resnet50--torch--baseline--bs3.json", INTEL_ENV)
    cal = r / "calibration" / OLD
    _record(cal / f"records-{B[:12]}" / "resnet50--torch--baseline--bs6.json", INTEL_ENV)
    calibration = {"commit": B, "machine": OLD, "records": f"/x/results/calibration/{OLD}/r"}
    (cal / "torch-1.0.json").write_text(json.dumps(calibration, indent=1, sort_keys=True))
    check = {"cpu": "AMD EPYC", "host_cpu_count": 2, "machine": OLD, "rows": [{"s": 1.25}]}
    (r / "selfcheck" / OLD).mkdir(parents=True)
    (r / "selfcheck" / OLD / "resnet50-64px-bs4-aaaa.json").write_text(
        json.dumps(check, indent=1, sort_keys=True)
    )
    _asv(r / "asv" / OLD / "aaaaaaaa-checkout-py3.11.json", A, AMD_ENV["platform"])
    _asv(r / "asv" / OLD / "bbbbbbbb-checkout-py3.11.json", B, INTEL_ENV["platform"])
    _asv(r / "asv" / OLD / "cccccccc-checkout-py3.11.json", "c" * 40, AMD_ENV["platform"])
    (r / "asv" / OLD / "machine.json").write_text(json.dumps({"machine": OLD, "version": 1}))
    (r / "asv" / "benchmarks.json").write_text("{}")
    return r


def _tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_each_record_moves_to_its_own_hosts_machine(old_results, capsys):
    r = old_results
    assert M.main(["--results", str(r), "--repo", str(r)]) == 0
    out = capsys.readouterr().out
    assert not (r / "records" / OLD).exists() and not (r / "asv" / OLD).exists()
    amd = json.loads((r / "records" / AMD / f"cpu-{A[:12]}" /
                      "resnet50--torch--baseline--bs2.json").read_text())  # fmt: skip
    assert amd["environment"]["machine"] == AMD
    assert amd["environment"]["machine_before_migration"] == OLD
    assert amd["metrics"] == {"peak_host_rss_bytes": 1.5}  # measured values untouched
    assert (r / "records" / AMD / f"cpu-{A[:12]}" / "logs" /
            "resnet50--torch--baseline--bs2.log").read_text() == "log\n"  # fmt: skip
    intel = r / "records" / INTEL / f"cpu-{B[:12]}"
    assert json.loads((intel / "resnet50--torch--baseline--bs2.json").read_text())[
        "environment"]["machine"] == INTEL  # fmt: skip
    # refused before its worker ran (no environment): with its store, untouched
    assert json.loads((intel / "resnet50--torch--baseline--bs4.json").read_text())[
        "environment"] == {}  # fmt: skip
    # a store of two hosts is split, each record to its own
    smoke = f"smoke-{'c' * 12}"
    assert (r / "records" / AMD / smoke / "resnet50--torch--baseline--bs1.json").exists()
    assert sorted(p.name for p in (r / "records" / INTEL / smoke).iterdir()) == [
        "resnet50--torch--baseline--bs2.json", "resnet50--torch--baseline--bs3.json"]  # fmt: skip
    assert "split" in out
    # the calibration goes with its records' host
    cal = json.loads((r / "calibration" / INTEL / "torch-1.0.json").read_text())
    assert cal["machine"] == INTEL and f"/{INTEL}/" in cal["records"]
    check = json.loads((r / "selfcheck" / AMD / "resnet50-64px-bs4-aaaa.json").read_text())
    assert check["machine"] == AMD and check["rows"] == [{"s": 1.25}]


def test_asv_results_go_with_their_commits_records_without_the_kernel_build(old_results, capsys):
    r = old_results
    M.main(["--results", str(r), "--repo", str(r)])
    out = capsys.readouterr().out
    a = json.loads((r / "asv" / AMD / "aaaaaaaa-checkout-py3.11.json").read_text())
    b = json.loads((r / "asv" / INTEL / "bbbbbbbb-checkout-py3.11.json").read_text())
    assert a["params"] == {
        "arch": "x86_64", "cpu": "AMD EPYC", "machine": AMD, "num_cpu": "2",
        "os": "Linux x86_64 glibc2.36", "python": "3.11", "ram": "24GB",
    }  # fmt: skip
    assert b["params"]["os"] == a["params"]["os"] and b["params"]["machine"] == INTEL
    assert a["results"] == {"suite.Resnet50_cpu.track_peak_host_rss": [[1.0]]}
    # a commit whose records span two hosts: the majority's, and said so
    assert (r / "asv" / INTEL / "cccccccc-checkout-py3.11.json").exists()
    assert "cannot be split" in out
    for machine in (AMD, INTEL):
        described = json.loads((r / "asv" / machine / "machine.json").read_text())
        assert described["machine"] == machine and described["os"] == "Linux x86_64 glibc2.36"
    assert (r / "asv" / "benchmarks.json").read_text() == "{}"


def test_the_migration_run_again_changes_nothing(old_results, capsys):
    r = old_results
    assert M.main(["--results", str(r), "--repo", str(r), "--dry-run"]) == 0
    assert (r / "records" / OLD).exists()  # a dry run moves nothing
    M.main(["--results", str(r), "--repo", str(r)])
    after = _tree(r)
    capsys.readouterr()
    assert M.main(["--results", str(r), "--repo", str(r)]) == 0
    assert "nothing to migrate" in capsys.readouterr().out
    assert _tree(r) == after
