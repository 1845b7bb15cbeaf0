"""A GPU command's results travel as one archive and unpack under the machine's name."""

import io
import tarfile

import pytest

from membench.publish.archive import ArchiveError, pack, unpack


def results_of(root, machine):
    (root / "records" / machine / "gpu-quick-abc").mkdir(parents=True)
    (root / "records" / machine / "gpu-quick-abc" / "cell.json").write_text('{"status": "ok"}')
    (root / "asv" / machine).mkdir(parents=True)
    (root / "asv" / machine / "machine.json").write_text(f'{{"machine": "{machine}"}}')
    (root / "asv" / "benchmarks.json").write_text("{}")
    (root / "records" / "other-machine").mkdir(parents=True)
    (root / "records" / "other-machine" / "x.json").write_text("{}")


def test_pack_then_unpack_restores_the_machine_s_results(tmp_path):
    gpu, here = tmp_path / "gpu" / "results", tmp_path / "here" / "results"
    results_of(gpu, "nvidia-h100-80gb-hbm3-x1-16core")
    archive = tmp_path / "out" / "membench-resnet50.tar.gz"
    names = pack(archive, "nvidia-h100-80gb-hbm3-x1-16core", gpu)
    assert "records/other-machine" not in names
    machine, unpacked = unpack(archive, here)
    assert machine == "nvidia-h100-80gb-hbm3-x1-16core"
    record = here / "records" / machine / "gpu-quick-abc" / "cell.json"
    assert record.read_text() == '{"status": "ok"}'
    assert (here / "asv" / machine / "machine.json").exists()
    assert (here / "asv" / "benchmarks.json").exists()
    assert not (here / "records" / "other-machine").exists()
    assert unpacked == ["asv/benchmarks.json", f"asv/{machine}", f"records/{machine}"]


def test_unpack_keeps_the_checkout_s_own_asv_benchmark_list(tmp_path):
    gpu, here = tmp_path / "gpu" / "results", tmp_path / "here" / "results"
    results_of(gpu, "m")
    (gpu / "asv" / "benchmarks.json").write_text('{"from": "the measuring commit"}')
    (here / "asv").mkdir(parents=True)
    (here / "asv" / "benchmarks.json").write_text('{"from": "this checkout"}')
    archive = tmp_path / "m.tar.gz"
    pack(archive, "m", gpu)
    _, unpacked = unpack(archive, here)
    assert (here / "asv" / "benchmarks.json").read_text() == '{"from": "this checkout"}'
    assert unpacked == ["asv/m", "records/m"]
    assert (here / "asv" / "m" / "machine.json").exists()


def test_unpack_refuses_a_path_outside_the_machine_s_folders(tmp_path):
    archive = tmp_path / "bad.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in [
            ("membench-archive.json", b'{"machine": "m", "paths": []}'),
            ("records/another/x.json", b"{}"),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ValueError, match="outside m's results"):
        unpack(archive, tmp_path / "results")
    assert not (tmp_path / "results" / "records").exists()


def test_pack_without_results_says_so(tmp_path):
    with pytest.raises(ArchiveError, match="no results for machine .m. under"):
        pack(tmp_path / "a.tar.gz", "m", tmp_path / "results")


# -- hostile archives: refused whole, nothing written, one line and exit 2 from the CLI ------
def hostile(path, *members):
    """An archive of machine m with the given (name, kind, data-or-target) members."""
    with tarfile.open(path, "w:gz") as tar:
        manifest = b'{"machine": "m", "paths": []}'
        info = tarfile.TarInfo("membench-archive.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = payload
                tar.addfile(info)
            elif kind == tarfile.REGTYPE:
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            else:
                tar.addfile(info)
    return path


def other_machine_s_record(results):
    record = results / "records" / "other" / "store" / "x.json"
    record.parent.mkdir(parents=True)
    record.write_text("theirs")
    return record


HOSTILE = {
    # a link inside m's folder to another machine's, then a member written through it
    "symlink-then-write-through": [
        ("records/m/link", tarfile.SYMTYPE, "../other/store"),
        ("records/m/link/x.json", tarfile.REGTYPE, b"ours"),
    ],
    # a hard link to another machine's record, then a member of the same name
    "hardlink-then-overwrite": [
        ("records/m/x.json", tarfile.LNKTYPE, "records/other/store/x.json"),
        ("records/m/x.json", tarfile.REGTYPE, b"ours"),
    ],
    "fifo": [("records/m/pipe", tarfile.FIFOTYPE, None)],
    "device": [("records/m/dev", tarfile.CHRTYPE, None)],
    # a good member first: a refused archive must not leave it behind
    "good-then-outside": [
        ("records/m/store/a.json", tarfile.REGTYPE, b"{}"),
        ("/etc/membench-x", tarfile.REGTYPE, b"x"),
    ],
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_archive_is_refused_whole_and_touches_nothing(tmp_path, case, capsys):
    from membench.publish import archive as archive_module

    results = tmp_path / "results"
    theirs = other_machine_s_record(results)
    bad = hostile(tmp_path / "bad.tar.gz", *HOSTILE[case])
    with pytest.raises(archive_module.ArchiveError):
        unpack(bad, results)
    assert theirs.read_text() == "theirs"
    assert not (results / "records" / "m").exists()
    assert [p.name for p in results.iterdir()] == ["records"]  # no staging folder left


@pytest.mark.parametrize("case", ["missing", "not-an-archive", "no-manifest"])
def test_unpack_refuses_a_file_that_is_no_membench_archive_in_one_line(
    tmp_path, case, capsys, monkeypatch
):
    from membench import paths
    from membench.cli import main

    monkeypatch.setattr(paths, "RESULTS", tmp_path / "results")
    path = tmp_path / "a.tar.gz"
    if case == "not-an-archive":
        path.write_text("hello")
    elif case == "no-manifest":
        with tarfile.open(path, "w:gz") as tar:
            info = tarfile.TarInfo("records/m/x.json")
            tar.addfile(info, io.BytesIO(b""))
    assert main(["unpack", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"membench unpack: error: {path}")
    assert not (tmp_path / "results" / "records").exists()


def test_pack_refuses_a_machine_without_results_and_writes_nothing(tmp_path, capsys):
    from membench.cli import main

    archive = tmp_path / "out.tar.gz"
    assert main(["pack", str(archive), "--machine", "nope"]) == 2
    assert "no results for machine 'nope'" in capsys.readouterr().err
    assert not archive.exists()
