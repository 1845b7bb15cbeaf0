"""A hostile user's third pass: paths that are not what they seem (links, FIFOs, files where
folders belong, JSON nested past the parser), packs and unpacks that write all or nothing,
MEMBENCH_ variables checked at start-up as flags are, and numbers and names read by one rule.
Each refused in one line with exit status 2 before any work, or handled as documented."""

import os
import re
import signal
import tarfile
from pathlib import Path

import pytest

from membench import argtypes, file_rules, paths, settings
from membench.cli import main
from membench.publish import archive
from membench.records import CorruptRecordError, RecordStore, read_record
from membench.store_lock import StoreLockError, store_lock

from .conftest import REPO
from .test_hostile_input import FAKE_RUN, refused

LINE = "{store}: membench writes only into real folders and files of its own"


# -- a store's paths ---------------------------------------------------------------------------
def test_a_lock_that_is_a_link_is_refused_and_nothing_written_through_it(tmp_path):
    store, target = tmp_path / "store", tmp_path / "elsewhere"
    store.mkdir()
    (store / ".lock").symlink_to(target)  # dangling: it would create the file it names
    with pytest.raises(StoreLockError) as caught, store_lock(store):
        pass
    assert str(caught.value) == (
        f"store {store}: its lock file {store / '.lock'} is a symbolic link (to {target}), "
        "not a file; remove it, then run again"
    )
    assert not target.exists()
    target.write_text("theirs\n")
    with pytest.raises(StoreLockError), store_lock(store):
        pass
    assert target.read_text() == "theirs\n"  # no PID written into the file it points to


def test_a_lock_that_is_a_fifo_is_one_line(fake_framework, tmp_path, capsys):
    store = tmp_path / "store"
    store.mkdir()
    os.mkfifo(store / ".lock")
    line = refused([*FAKE_RUN, "-s", "baseline", "--store", str(store)], capsys)
    assert line == (
        f"membench: error: store {store}: its lock file {store / '.lock'} is a FIFO, not a "
        "file; remove it, then run again"
    )
    assert sorted(p.name for p in store.iterdir()) == [".lock"]


@pytest.mark.parametrize("what", ["file", "fifo"])
def test_a_store_folder_that_is_a_file_is_refused_before_the_lock(
    what, fake_framework, tmp_path, capsys
):
    store = tmp_path / "store"
    store.mkdir()
    (store / "logs").write_text("") if what == "file" else os.mkfifo(store / "logs")
    line = refused([*FAKE_RUN, "-s", "baseline", "--store", str(store)], capsys)
    kind = "a file" if what == "file" else "a FIFO"
    assert line.startswith(
        f"membench: error: store {store}: {store / 'logs'} is {kind}, not a folder: membench "
        "writes only into real folders and files of its own"
    )
    assert [p.name for p in store.iterdir()] == ["logs"]  # no .lock left behind


def test_a_log_that_is_a_link_is_never_written_through(fake_framework, tmp_path, capsys):
    store, victim = tmp_path / "store", tmp_path / "victim"
    (store / "logs").mkdir(parents=True)
    log = store / "logs" / "fake-work--fake--baseline--bs1.log"
    log.symlink_to(victim)
    assert main([*FAKE_RUN, "-s", "baseline", "-b", "1", "--store", str(store)]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]  # after the run's progress
    assert line == (
        f"membench: error: {log} is a symbolic link (to {victim}): membench reads and writes "
        "regular files only"
    )
    assert not victim.exists() and list(store.glob("*.json")) == []


@pytest.fixture
def no_hang():
    """A test that would wait for ever fails after 20 s instead (a FIFO's reader waits for a
    writer that never comes)."""

    def hung(signum, frame):
        raise TimeoutError("waited 20 s: a FIFO was opened for reading")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_a_record_that_is_a_fifo_or_nested_too_deep_is_named_never_waited_on(
    tmp_path, capsys, no_hang
):
    store = tmp_path / "store"
    store.mkdir()
    os.mkfifo(store / "a.json")  # a reader that opened it would wait for a writer for ever
    (store / "b.json").write_text("[" * 100_000 + "]" * 100_000)
    (store / "c.json").symlink_to(tmp_path / "elsewhere.json")
    good, bad = RecordStore(store).scan()
    assert good == [] and [e.why for e in bad] == [
        "a FIFO, not a file",
        "ValueError: JSON nested too deeply to read",
        f"a symbolic link (to {tmp_path / 'elsewhere.json'}), not a file",
    ]
    assert main(["show", str(store)]) == 1
    out = capsys.readouterr().out
    assert f"corrupt record file {store / 'a.json'}: a FIFO, not a file" in out
    assert "JSON nested too deeply to read" in out and "Traceback" not in out


def test_report_and_compare_name_a_record_nested_too_deep(tmp_path, capsys):
    results = tmp_path / "results"
    folder = paths.preset_store("m", "smoke", "c" * 12, results)
    folder.mkdir(parents=True)
    (folder / "deep.json").write_text('{"cell": ' * 5000 + "1" + "}" * 5000)
    out = tmp_path / "report"
    main(["report", "--out", str(out), "--results", str(results)])
    err = capsys.readouterr().err
    assert f"corrupt record file {folder / 'deep.json'}: ValueError: JSON nested too deeply" in err
    assert "Traceback" not in err and "RecursionError" not in err
    main(["compare", "a", "b", "--results", str(results)])
    assert "RecursionError" not in capsys.readouterr().err
    with pytest.raises(CorruptRecordError, match="nested too deeply"):
        read_record(folder / "deep.json")


def test_the_file_rule_reads_no_link_no_fifo_and_bounded():
    assert file_rules.loads("[1]") == [1]
    with pytest.raises(ValueError, match="nested too deeply"):
        file_rules.loads("[" * 100_000)


# -- pack and unpack -----------------------------------------------------------------------------
@pytest.fixture
def results(tmp_path, monkeypatch):
    """A throwaway results/ holding machine m's one record, as the commands see it."""
    root = tmp_path / "results"
    folder = paths.preset_store("m", "smoke", "c" * 12, root)
    folder.mkdir(parents=True)
    (folder / "x.json").write_text("{}\n")
    monkeypatch.setattr(paths, "RESULTS", root)
    monkeypatch.chdir(tmp_path)
    return root


def test_pack_never_replaces_a_file_unless_forced(results, tmp_path, capsys):
    existing = tmp_path / "a.tar.gz"
    existing.write_text("mine")
    line = refused(["pack", str(existing), "--machine", "m"], capsys)
    assert line == (
        f"membench pack: error: {existing} exists (a file): give --force to replace it, or "
        "give another path"
    )
    assert existing.read_text() == "mine"
    assert main(["pack", str(existing), "--machine", "m", "--force"]) == 0
    assert tarfile.is_tarfile(existing)
    os.mkfifo(tmp_path / "fifo.tar.gz")
    line = refused(["pack", str(tmp_path / "fifo.tar.gz"), "--machine", "m", "--force"], capsys)
    assert "fifo.tar.gz exists (a FIFO): remove it first" in line


def test_a_pack_over_the_limit_leaves_nothing(results, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(archive, "LIMIT_BYTES", 10)
    target = tmp_path / "out" / "a.tar.gz"
    line = refused(["pack", str(target), "--machine", "m"], capsys)
    assert re.fullmatch(
        rf"membench pack: error: m's results pack to 0\.0 MiB, over 0 MiB: nothing written to "
        rf"{re.escape(str(target))}",
        line,
    )
    assert list(target.parent.iterdir()) == []  # neither the archive nor its temporary


@pytest.mark.parametrize("machine", ["..", "/etc", "a\nb", "!!!", "My Box", ""])
def test_a_machine_name_follows_one_rule_wherever_it_comes_from(
    machine, results, tmp_path, monkeypatch, capsys
):
    line = refused(["pack", str(tmp_path / "a.tar.gz"), "--machine", machine], capsys)
    assert "not a machine name" in line or "give" in line
    monkeypatch.setenv("MEMBENCH_MACHINE", machine)
    if machine:  # an empty variable is an unset one
        line = refused(["list"], capsys)
        assert line.startswith(f"membench: error: MEMBENCH_MACHINE={machine!r}: not a machine")
    assert list(tmp_path.glob("*.tar.gz")) == []
    with pytest.raises(archive.ArchiveError, match="not a machine name"):
        archive.pack(tmp_path / "b.tar.gz", machine, results)


def archive_of(path: Path, machine: str, name: str) -> Path:
    """An archive whose manifest names machine and which holds one file, name."""
    import io
    import json

    with tarfile.open(path, "w:gz") as tar:
        for member, data in [
            (archive.MANIFEST, json.dumps({"machine": machine, "paths": []}).encode()),
            (name, b"{}\n"),
        ]:
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_an_archive_naming_a_machine_with_a_newline_is_refused(results, tmp_path, capsys):
    bad = archive_of(tmp_path / "bad.tar.gz", "a\nb", "records/a\nb/smoke-c/x.json")
    line = refused(["unpack", str(bad)], capsys)
    assert "names no usable machine: not a machine name: 'a\\nb'" in line
    assert sorted(p.name for p in (results / "records").iterdir()) == ["m"]


def test_unpack_of_several_archives_checks_them_all_before_writing_any(results, tmp_path, capsys):
    good = archive_of(tmp_path / "good.tar.gz", "n", "records/n/smoke-c/x.json")
    bad = archive_of(tmp_path / "bad.tar.gz", "n", "records/elsewhere/x.json")
    line = refused(["unpack", str(good), str(bad)], capsys)
    assert line == (
        f"membench unpack: error: {bad}: records/elsewhere/x.json lies outside n's results"
    )
    assert not (results / "records" / "n").exists()  # the good one was not written either
    assert [p.name for p in results.iterdir()] == ["records"]  # no staging folder left
    assert main(["unpack", str(good)]) == 0
    assert (results / "records" / "n" / "smoke-c" / "x.json").is_file()


# -- MEMBENCH_ variables -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("MEMBENCH_MEMORY_CAP", "garbage", "not a size: 'garbage' (e.g. 2GiB, 1500MiB, 1TiB)"),
        ("MEMBENCH_PROBE_BUDGET", "nan", "not a probe budget"),
        ("MEMBENCH_PYTHON_TORCH", "/bin/false", "'/bin/false' is not a Python 3 interpreter"),
        ("MEMBENCH_PYTHON_TORCH", "/no/such/python", "no executable Python at '/no/such/python'"),
        ("MEMBENCH_PRESET", "tpu", "unknown preset 'tpu'"),
        ("MEMBENCH_WORLD_SIZE", "\uff12", "must be a positive integer"),
        ("MEMBENCH_TRACE", "1", "set by membench for its workers from --trace"),
    ],
)
def test_a_variable_is_checked_at_start_up_as_a_flag(
    variable, value, message, fake_framework, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv(variable, value)
    monkeypatch.chdir(tmp_path)
    line = refused([*FAKE_RUN, "-s", "baseline", "--store", str(tmp_path / "s")], capsys)
    assert line.startswith(f"membench: error: {variable}={value!r}: ") and message in line
    assert list(tmp_path.iterdir()) == []  # before any work: no store, no worker


def test_a_memory_cap_from_the_environment_is_the_run_s_cap(monkeypatch):
    from membench.commands import build_parser
    from membench.commands.run_options import RunOptions

    monkeypatch.setenv("MEMBENCH_MEMORY_CAP", "1GiB")
    assert RunOptions.of(build_parser().parse_args(["run"])).memory_cap == 2**30
    flag = build_parser().parse_args(["run", "--memory-cap", "2GiB"])
    assert RunOptions.of(flag).memory_cap == 2**31  # the flag wins


def test_every_membench_variable_the_code_names_is_in_the_table():
    """The table is the one place: a variable read (or written) anywhere in the package or
    the scripts and missing from it would be read unchecked."""
    named = set()
    for folder in ("membench", "scripts", "benchmarks"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".sh") and path.is_file():
                named |= set(re.findall(r"\bMEMBENCH_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    named -= {"MEMBENCH_PYTHON_JITTOR"}  # the family's example
    unknown = sorted(n for n in named if settings.setting(n) is None)
    assert unknown == []
    documented = (REPO / "docs" / "methodology.md").read_text()
    assert settings.markdown() in documented  # the docs print the table as it is


@pytest.mark.parametrize(
    ("source", "error"),
    [("raise SystemExit(0)", "SystemExit: 0"), ("raise KeyboardInterrupt", "KeyboardInterrupt")],
    ids=["exits", "interrupts"],
)
def test_a_plugin_that_exits_or_interrupts_at_import_is_a_plugin_error(
    source, error, tmp_path, monkeypatch, capsys
):
    module = f"plugin_{abs(hash(source))}"
    (tmp_path / f"{module}.py").write_text(source + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("MEMBENCH_PLUGINS", module)
    line = refused(["list"], capsys)
    assert line.startswith(f"membench: error: MEMBENCH_PLUGINS: module '{module}' cannot be")
    assert line.endswith(error)


# -- numbers and names -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compare", "a", "b", "--threshold", "\uff10.5"], "--threshold: must be a fraction"),
        ([*FAKE_RUN, "--timeout", "\uff11\uff10"], "--timeout: must be a positive number"),
        ([*FAKE_RUN, "-b", "\uff14"], "batch sizes must be integers"),
        (["capacity", "--budget", "\uff12GiB"], "--budget: not a size"),
        ([*FAKE_RUN, "--timeout", "1_000"], "--timeout: must be a positive number"),
        ([*FAKE_RUN, "--timeout", "1e-300"], "--timeout: must be at least 1 s (a worker takes"),
        (["versions", "--new", "--only", "nope"], "unknown framework in requirements/version"),
        (["run", "--engine", "ray", "--address", ""], "--address: give auto or HOST:PORT"),
        (["run", "--engine", "ray", "--address", "head:99999"], "(port 1-65535)"),
        (["plan", "gpu-decision", "--skip", "nope"], "unknown framework 'nope'"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_numbers_and_names_are_read_by_one_rule(
    argv, message, fake_framework, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    if argv[0] == "run":
        argv = [*argv, "--store", str(tmp_path / "s")]
    assert message in refused(argv, capsys)
    assert list(tmp_path.iterdir()) == []  # no store made, no index asked


def test_plan_skips_a_framework_its_plan_does_not_measure(capsys):
    """scripts/gpu_node.sh gives --skip jittor to every plan where Jittor did not build."""
    assert main(["plan", "gpu-decision", "--skip", "jittor"]) == 0


def test_numbers_read_alike_everywhere():
    for parse in (argtypes.positive_seconds, argtypes.byte_size, argtypes.positive_int):
        with pytest.raises(Exception, match="got '\uff15'|not a size"):
            parse("\uff15")
    assert argtypes.positive_seconds("1.5") == 1.5 and argtypes.cell_timeout("1") == 1.0
    assert argtypes.machine("amd-epyc-f26m2-avx512bf16-2core-24gib")
