"""A GPU command's results travel as one archive and unpack under the machine's name."""

import io
import tarfile

import pytest

from membench.archive import pack, unpack


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
    with pytest.raises(FileNotFoundError, match="no results for machine m"):
        pack(tmp_path / "a.tar.gz", "m", tmp_path / "results")
