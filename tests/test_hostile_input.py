"""What a newcomer and a hostile user tripped over (issue 44): each refused in one line with
exit status 2 before any work, or handled as documented: broken plugins, paths the kernel
cannot take, out-of-range numbers, a store whose lock or logs are not what they should be,
a disk that fills while a cell measures, flags that did nothing, and help that disagreed."""

import argparse
import errno
import json
import os
import shlex
import subprocess
import sys

import pytest

from membench import argtypes, paths, registry
from membench.cells import supervision
from membench.cli import main
from membench.commands import EXAMPLES, build_parser
from membench.instruments import marks
from membench.measure import worker
from membench.records import NO_SPACE_EXIT, RECORD_ROOM_BYTES, Cell, Record, ReservedJson

from .conftest import REPO

FAKE_RUN = ["run", "-w", "fake-work", "-f", "fake", "-p", "smoke"]


def refused(argv: list[str], capsys) -> str:
    """main(argv)'s one line on stderr, after checking the exit status is 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("membench"), err
    return lines[0]


# -- MEMBENCH_PLUGINS ------------------------------------------------------------------------
PLUGINS = {
    "missing": (None, "ModuleNotFoundError: No module named 'plugin_missing'"),
    "raises": ("raise RuntimeError('boom at import')", "RuntimeError: boom at import"),
    "syntax": ("def broken(:\n    pass", "SyntaxError: "),
    "registers-none": (
        "from membench.registry import register_framework\nregister_framework(None)",
        "TypeError: register_framework takes a Framework, got None",
    ),
    "registers-none-workload": (
        "from membench.registry import register_workload\nregister_workload(None)",
        "TypeError: register_workload takes a Workload, got None",
    ),
}


@pytest.mark.parametrize("case", PLUGINS)
def test_a_broken_plugin_is_one_line_naming_the_variable_the_module_and_the_error(
    case, tmp_path, monkeypatch, capsys
):
    source, error = PLUGINS[case]
    module = f"plugin_{case.replace('-', '_')}"
    if source is not None:
        (tmp_path / f"{module}.py").write_text(source + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("MEMBENCH_PLUGINS", module)
    line = refused(["list"], capsys)
    assert line.startswith(f"membench: error: MEMBENCH_PLUGINS: module '{module}' cannot be")
    assert error in line


def test_a_broken_plugin_stops_every_command_in_a_fresh_process(tmp_path):
    (tmp_path / "plugin_raises.py").write_text("raise ValueError('no')\n")
    env = {**os.environ, "MEMBENCH_PLUGINS": "plugin_raises", "PYTHONPATH": str(tmp_path)}
    for argv in (["list"], ["run", "--estimate"], ["show", str(tmp_path)]):
        done = subprocess.run(
            [sys.executable, "-m", "membench", *argv], cwd=REPO, env=env, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            "membench: error: MEMBENCH_PLUGINS: module 'plugin_raises' cannot be loaded: "
            "ValueError: no"
        ]
        assert done.stdout == ""


# -- paths the kernel cannot take ------------------------------------------------------------
LONG_NAME = "a" * 300
LONG_PATH = "/tmp/" + "/".join(["b" * 99] * 50)  # 5,005 characters, each component fine
PATH_ARGS = [
    ["run", "--store", "{p}"],
    ["show", "{p}"],
    ["report", "--out", "{p}"],
    ["report", "--out", "{tmp}/r", "--results", "{p}"],
    ["pack", "{p}"],
    ["unpack", "{p}"],
    ["compare", "a", "b", "--results", "{p}"],
    ["calibrate", "--results", "{p}"],
    ["predict", "--results", "{p}"],
    ["selfcheck", "--json", "{p}"],
]


@pytest.mark.parametrize("argv", PATH_ARGS, ids=[" ".join(a[:2]) for a in PATH_ARGS])
@pytest.mark.parametrize(
    ("long", "message"),
    [
        (f"{{tmp}}/{LONG_NAME}", "path component too long: 300 bytes, at most 255"),
        (LONG_PATH, "path too long: 5004 bytes, at most 4095"),
    ],
    ids=["component", "whole"],
)
def test_a_path_too_long_is_refused_by_the_parser(argv, long, message, tmp_path, capsys):
    argv = [a.format(p=long, tmp=tmp_path).format(tmp=tmp_path) for a in argv]
    line = refused(argv, capsys)
    assert message in line and "Errno" not in line
    assert list(tmp_path.iterdir()) == []


def test_a_path_with_a_nul_or_empty_is_refused():
    for text, why in [("a\0b", "cannot hold a NUL"), ("", "give a path")]:
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            argtypes.checked_path(text)
    assert argtypes.checked_path("x" * 255).name == "x" * 255  # the limit itself is a path


# -- numbers out of range --------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [[*FAKE_RUN, "--timeout", "1e308"], ["plan", "gpu-quick", "--seconds", "1e308"],
     [*FAKE_RUN, "--timeout", "604801"]],
    ids=["timeout", "plan seconds", "a second over"],
)  # fmt: skip
def test_a_time_beyond_a_week_is_refused_naming_the_range(argv, tmp_path, capsys):
    line = refused([*argv, *(["--store", str(tmp_path / "s")] if argv[0] == "run" else [])], capsys)
    assert "must be at most 604800 seconds (a week)" in line
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "argv, message",
    [(["capacity", "--budget", "-1GiB"], "argument --budget: a size must be positive"),
     (["capacity", "--budget", "-.5GiB"], "argument --budget: a size must be positive"),
     (["run", "--memory-cap", "-2GiB"], "argument --memory-cap: a size must be positive")],
    ids=["budget", "fraction", "memory cap"],
)  # fmt: skip
def test_a_negative_size_is_refused_by_its_option_saying_why(argv, message, capsys):
    """argparse alone takes '-1GiB' for an option and says the option lacks its argument."""
    assert message in refused(argv, capsys)


@pytest.mark.parametrize(
    "argv, message",
    [(["capacity", "--budget", "2"], "'2' is under 64 MiB (a number without a unit is bytes)"),
     (["capacity", "--budget", "1e-9GiB"], "'1e-9GiB' is under 64 MiB, less than any cell"),
     (["run", "--memory-cap", "1"], "--memory-cap: '1' is under 64 MiB (a number without")],
    ids=["bare number", "tiny with a unit", "memory cap"],
)  # fmt: skip
def test_a_size_no_cell_fits_in_is_refused_as_a_unit_left_out(
    argv, message, tmp_path, capsys, monkeypatch
):
    """`--budget 2` was 2 bytes: a search of nothing written into results/; `--memory-cap 1`
    ended every cell `oom`, which later runs kept."""
    monkeypatch.chdir(tmp_path)
    assert message in refused(argv, capsys)
    assert argtypes.byte_size("64MiB") == 2**26 and argtypes.byte_size(str(2**31)) == 2**31
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("command", [["run"], ["bench"], ["capacity", "--estimate"]])
def test_a_gpu_preset_on_a_host_without_a_gpu_is_refused_before_any_work(
    command, tmp_path, capsys, monkeypatch
):
    """Its cells would each start a worker and end `error` by the device guard, exit 0; a Ray
    cluster's nodes (--address) may have the GPUs this host lacks, so that is left to them."""
    from membench import environment

    monkeypatch.setattr(environment, "gpu_info", lambda: {})
    monkeypatch.chdir(tmp_path)
    line = refused([*command, "-p", "gpu-quick", "-w", "transformer", "-f", "torch"], capsys)
    assert "preset gpu-quick is a GPU preset and this host has no NVIDIA GPU" in line
    assert not any(tmp_path.iterdir())
    from membench.commands.selection import preset_of

    remote = argparse.Namespace(preset="gpu-quick", engine="ray", address="head:6379")
    assert preset_of(remote) == "gpu-quick"
    assert "preset gpu-quick is a GPU preset" in refused(["versions", "-p", "gpu-quick"], capsys)
    monkeypatch.setenv("MEMBENCH_PRESET", "gpu-quick")  # a preset the user did not type here
    assert "preset gpu-quick (from $MEMBENCH_PRESET) is a GPU preset" in refused(["run"], capsys)
    assert not any(tmp_path.iterdir())


def test_only_a_long_option_s_value_is_joined_and_nothing_after_a_bare_dashdash():
    from membench.commands.parsing import joined_negative_values as joined

    assert joined(["--budget", "-1GiB", "-w", "x"]) == ["--budget=-1GiB", "-w", "x"]
    assert joined(["--budget=-1", "-2"]) == ["--budget=-1", "-2"]  # already has its value
    assert joined(["-b", "-4", "--x", "-w"]) == ["-b", "-4", "--x", "-w"]  # not a number
    assert joined(["--x", "--", "--y", "-1"]) == ["--x", "--", "--y", "-1"]


def test_a_week_is_still_a_timeout():
    assert argtypes.positive_seconds("604800") == 604800.0


def test_a_capacity_search_that_would_start_above_its_end_is_refused(
    fake_framework, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr("membench.paths.RESULTS", tmp_path / "results")
    argv = ["capacity", "-w", "fake-work", "-f", "fake", "-p", "smoke", "--budget", "1GiB"]
    line = refused([*argv, "--first", "100", "--max-batch", "10"], capsys)
    assert line == (
        "membench capacity: error: --first 100 is above the largest batch tried, 10 (--max-batch)"
    )
    largest = registry.preset("cpu-quick").capacity_max_batch
    line = refused([*argv, "-p", "cpu-quick", "--first", str(largest + 1)], capsys)
    assert f"above the largest batch tried, {largest} (preset cpu-quick's largest" in line
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("text", "value"),
    [("1TiB", 2**40), ("1.5tib", 1.5 * 2**40), ("2TB", 2e12), ("3 tb", 3e12), ("2GiB", 2**31)],
)
def test_sizes_in_tebibytes_and_terabytes_are_sizes(text, value):
    assert argtypes.byte_size(text) == value


def test_a_terabyte_budget_is_judged_as_a_budget(capsys):
    line = refused(["capacity", "--budget", "1TiB"], capsys)
    assert "--budget 1.02e+03 GiB is above the memory cap per cell" in line


# -- the store ---------------------------------------------------------------------------------
def test_a_lock_that_is_a_folder_is_one_line(fake_framework, tmp_path, capsys):
    store = tmp_path / "store"
    (store / ".lock").mkdir(parents=True)
    line = refused([*FAKE_RUN, "-s", "baseline", "--store", str(store)], capsys)
    assert line == (
        f"membench: error: store {store}: its lock file {store / '.lock'} is a folder, not a "
        "file; remove it, then run again"
    )
    assert sorted(p.name for p in store.iterdir()) == [".lock"]  # nothing measured


@pytest.mark.parametrize("folder", ["logs", "timelines", "traces", "probes", "probes/logs"])
def test_a_run_writes_nothing_through_a_linked_folder_of_its_store(
    folder, fake_framework, tmp_path, capsys
):
    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (store / folder).parent.mkdir(parents=True)
    (store / folder).symlink_to(elsewhere)
    line = refused([*FAKE_RUN, "-s", "baseline", "--store", str(store)], capsys)
    assert line == (
        f"membench: error: store {store}: {store / folder} is a symbolic link (to {elsewhere}), "
        "not a folder: membench writes only into real folders and files of its own (no link, "
        "FIFO or device); remove it, or give another --store"
    )
    assert list(elsewhere.iterdir()) == [] and not (store / ".lock").exists()


def test_a_linked_record_folder_in_a_results_tree_is_named_when_skipped(tmp_path, capsys):
    root, elsewhere = tmp_path / "records", tmp_path / "elsewhere"
    (root / "m" / "cpu-c0").mkdir(parents=True)
    (root / "m" / "cpu-c0" / "a.json").write_text("{}")
    elsewhere.mkdir()
    (elsewhere / "b.json").write_text("{}")
    (root / "m" / "linked").symlink_to(elsewhere)
    assert list(paths.record_files(root)) == [root / "m" / "cpu-c0" / "a.json"]
    assert capsys.readouterr().err == (
        f"membench: skipped {root / 'm' / 'linked'}: a symbolic link to a folder (records are "
        "read from real folders only: copy them in, or read the folder it links to)\n"
    )
    list(paths.record_files(root))
    assert capsys.readouterr().err == ""  # said once per process


def test_a_report_of_a_folder_without_records_is_refused(tmp_path, capsys):
    (tmp_path / "results" / "records").mkdir(parents=True)
    out = tmp_path / "report"
    line = refused(["report", "--out", str(out), "--results", str(tmp_path / "results")], capsys)
    assert f"no records under {tmp_path / 'results'}" in line and "nothing to report" in line
    assert not out.exists()


# -- a disk that fills while a cell measures ---------------------------------------------------
def disk_full_run(store, monkeypatch, how: str) -> Record:
    monkeypatch.setenv("FAKE_BEHAVIOUR", "disk-full")
    monkeypatch.setenv("FAKE_DISK_FULL", how)
    cell = Cell("fake-work", "fake", "baseline", 1, "smoke")
    (record,) = supervision.run([cell], store, supervision.RunControl(timeout=60)).records
    return record


def test_a_disk_that_fills_while_the_cell_measures_keeps_its_record(
    fake_framework, store, monkeypatch
):
    """No file can be created after the first step: the record's room was taken before."""
    record = disk_full_run(store, monkeypatch, "new-files")
    assert record.status == "ok", record.reason
    assert record.environment["strategy_notes"] == {"behaviour": "disk-full"}
    assert len(record.step_times) == registry.preset("smoke").measure_steps
    assert record.metrics["step_seconds_median"] > 0
    assert store.get(record.cell).status == "ok"
    assert list((store.root / "logs").glob(".*")) == []  # no room left behind


def test_a_record_that_finds_no_room_is_kept_from_the_worker_s_log(
    fake_framework, store, monkeypatch
):
    """Not even the reserved file can be written: the worker prints its record to its log and
    exits NO_SPACE_EXIT; the runner keeps the figures and notes the cause."""
    record = disk_full_run(store, monkeypatch, "writes")
    assert record.status == "ok" and record.metrics["step_seconds_median"] > 0
    assert "no space left on device (ENOSPC)" in record.environment["record_file_error"]
    assert "kept from the worker's log" in record.environment["record_file_error"]


def test_a_record_lost_to_a_full_disk_names_the_cause(fake_framework, store, monkeypatch):
    record = disk_full_run(store, monkeypatch, "everything")
    assert record.status == "error"
    assert record.reason.startswith("no space left on device (ENOSPC) for the worker's record")
    assert "exited with status" not in record.reason


def test_a_worker_without_room_for_its_record_measures_nothing(tmp_path, monkeypatch):
    def full(path, size=RECORD_ROOM_BYTES):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    measured = []
    monkeypatch.setattr(worker, "ReservedJson", full)
    monkeypatch.setattr(worker, "run_cell", measured.append)
    monkeypatch.setattr(worker.lifeline, "first_to_go", lambda: None)
    cell = Cell("fake-work", "fake", "baseline", 1, "smoke")
    out = tmp_path / "r.json"
    assert worker.main(["--cell", cell.to_json(), "--out", str(out)]) == NO_SPACE_EXIT
    assert measured == [] and not out.exists()


def test_the_record_s_room_is_taken_without_a_name_and_given_back_unwritten(tmp_path):
    room = ReservedJson(tmp_path / "r.json")
    assert os.fstat(room.fd).st_blocks * 512 >= RECORD_ROOM_BYTES
    assert list(tmp_path.iterdir()) == []  # a killed worker leaves nothing behind
    room.write({"a": 1})
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": 1}
    assert (tmp_path / "r.json").stat().st_size < 100  # the rest of the room given back
    assert oct((tmp_path / "r.json").stat().st_mode & 0o777) == "0o644"


def test_phase_marks_stop_on_a_full_disk_without_ending_the_cell():
    marks.open_marks("/dev/full")  # every write: ENOSPC
    try:
        marks.mark(marks.BUILD)  # no exception
        assert not marks.marking()
        assert marks.lost == (
            "phase marks stopped at 'build': OSError: [Errno 28] No space left on device"
        )
    finally:
        marks.close_marks()
        marks.lost = ""


# -- flags that did nothing --------------------------------------------------------------------
def test_markdown_without_the_matrix_is_refused(capsys):
    line = refused(["list", "--markdown"], capsys)
    assert line == "membench list: error: --markdown applies to --matrix only: give both"


def test_a_name_or_batch_given_twice_is_one_cell(fake_framework, tmp_path, capsys):
    argv = [*FAKE_RUN, "-s", "baseline,baseline", "-s", "baseline", "-b", "1,1", "-b", "1"]
    assert main([*argv, "--store", str(tmp_path / "s"), "--estimate"]) == 0
    assert "1 cells, preset smoke" in capsys.readouterr().out
    args = build_parser().parse_args(["run", "-s", "infer,baseline,infer", "-b", "4,2", "-b", "4"])
    assert args.strategy == ["infer", "baseline"] and args.batch == [4, 2]


# -- help --------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def wide_help(monkeypatch):
    """Help on one line per paragraph: argparse wraps at hyphens too (cpu-quick)."""
    monkeypatch.setenv("COLUMNS", "1000")


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices


def test_preset_help_lists_every_preset_of_the_registry():
    for name in ("run", "bench", "capacity"):
        text = " ".join(subcommands()[name].format_help().split())
        for preset in registry.PRESETS:
            assert f"{preset}," in text or f"{preset} (" in text, (name, preset)


def test_capacity_is_described_as_the_search_it_is():
    parser = build_parser()
    listing = " ".join(parser.format_help().split())
    assert "by bisection" not in listing
    assert "the search guided by the memory model (plain doubling and bisection with" in listing


def test_every_positional_argument_has_help():
    for name, command in subcommands().items():
        for action in command._actions:
            if not action.option_strings:
                assert action.help, (name, action.dest)


def test_every_command_shows_an_example_that_parses(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".membench" / "records" / "MACHINE" / "cpu-quick").mkdir(parents=True)
    commands = subcommands()
    assert set(EXAMPLES) == set(commands)
    for name, command in commands.items():
        line, what = EXAMPLES[name]
        assert f"example:\n  {line}\n      {what}" in command.format_help()
        argv = shlex.split(line)
        assert argv[:2] == ["membench", name]
        build_parser().parse_args(argv[1:])  # SystemExit (a failure here) if it does not parse
