"""Records that are checked: a schema version, every field and metric checked on reading;
show, compare and report name the files they could not read."""

import json

import pytest

from membench.cli import main
from membench.records import (
    SCHEMA_VERSION,
    Cell,
    CorruptRecordError,
    NotARecordError,
    Record,
    RecordStore,
    read_record,
)

from .test_report import MACHINE, record, write_store

CELL = Cell("resnet50", "torch", "baseline", 2, "smoke")


def good(**metrics) -> dict:
    data = record("baseline", 2)
    data["metrics"].update(metrics)
    return data


def test_records_carry_their_schema_version_and_old_ones_read_as_version_1(store):
    path = store.put(Record(CELL, "ok", metrics={"peak_host_rss_bytes": 1.0}))
    assert json.loads(path.read_text())["schema"] == SCHEMA_VERSION == 2
    path.write_text(json.dumps(good()))  # written before the version existed
    assert read_record(path).status == "ok"


BAD_RECORDS = [
    (good(peak_host_rss_bytes=float("nan")), "peak_host_rss_bytes is nan, not a finite number"),
    (good(step_seconds_median=float("inf")), "step_seconds_median is inf, not a finite"),
    (good(throughput_samples_per_second=-3.0), "throughput_samples_per_second is -3.0, below"),
    (good(peak_host_rss_bytes="9e12"), "peak_host_rss_bytes is '9e12', not a number"),
    (good(peak_host_rss_bytes=True), "is True, not a number"),
    ({**good(), "schema": 99}, "schema version 99: written by a newer membench"),
    ({**good(), "cell": {**good()["cell"], "batch_size": "2"}}, "batch_size is '2'"),
    ({**good(), "cell": {**good()["cell"], "workload": ""}}, "workload is '', not a non-empty"),
    ({**good(), "step_times": [0.1, float("nan")]}, "a step time is nan"),
    ({**good(), "wall_seconds": -1}, "wall_seconds is -1.0, below zero"),
    ({**good(), "ranks": [{"peak_host_rss_bytes": float("nan")}]}, "rank 0 metric"),
]


@pytest.mark.parametrize(("data", "why"), BAD_RECORDS, ids=[w for _, w in BAD_RECORDS])
def test_a_record_out_of_kind_is_refused_with_its_reason(tmp_path, data, why):
    path = tmp_path / "x.json"
    path.write_text(json.dumps(data))  # json writes NaN and Infinity as Python reads them
    with pytest.raises(CorruptRecordError, match="corrupt record file") as err:
        read_record(path)
    assert why in str(err.value)


def test_signed_metrics_and_fractions_may_be_negative(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps(good(host_rss_growth_bytes=-4096.0,
                                    memory_prediction_error_spec_only=-0.2)))  # fmt: skip
    assert read_record(path).metrics["host_rss_growth_bytes"] == -4096.0


def test_json_that_is_no_record_is_named_as_such(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"threads": 4}')
    with pytest.raises(NotARecordError, match="not a record:"):
        read_record(path)


def test_show_lists_the_good_records_and_names_each_bad_file(tmp_path, capsys):
    store = tmp_path / "store"
    write_store(store, [record("baseline", 2), record("checkpoint", 2)])
    (store / "config.json").write_text('{"threads": 4}')
    (store / "broken.json").write_text(json.dumps(good(peak_host_rss_bytes=float("nan"))))
    assert main(["show", str(store)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "baseline" in out and "checkpoint" in out  # the good records are shown
    assert f"not a record: {store / 'config.json'}" in out
    assert f"corrupt record file {store / 'broken.json'}" in out and "not a finite" in out


def test_show_of_a_good_store_exits_0(tmp_path):
    store = tmp_path / "store"
    write_store(store, [record("baseline", 2)])
    assert main(["show", str(store)]) == 0
    assert len(RecordStore(store).scan()[0]) == 1


def test_show_of_a_folder_above_stores_names_the_stores_below_it(tmp_path, capsys):
    """results/records holds machines, each holding stores (a version sweep's a store per
    release): no records of its own; folders of other JSON files are not stores."""
    named = ("machine-a/cpu-1", "machine-a/versions-2/jax-0.7.1", "machine-b/cpu-3")
    for store in named:
        write_store(tmp_path / store, [record("baseline", 2)])
    (tmp_path / "asv" / "machine-a").mkdir(parents=True)  # asv's files: not records
    (tmp_path / "asv" / "machine-a" / "machine.json").write_text('{"machine": "machine-a"}')
    assert main(["show", str(tmp_path)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    stores = ", ".join(str(tmp_path / s) for s in named)
    assert f"no records in {tmp_path}, but in the stores below it: {stores} (membench" in out


def two_commits(root, broken: int = 1):
    """records of two commits of the suite, `broken` of the new one's files unreadable."""
    for commit in ("a" * 40, "b" * 40):
        data = [record(s, 2) for s in ("baseline", "checkpoint")]
        for d in data:
            d["environment"]["git"]["commit"] = commit
        store = root / "records" / MACHINE / f"smoke-{commit[:12]}"
        write_store(store, data)
    new = root / "records" / MACHINE / f"smoke-{'b' * 12}"
    for i in range(broken):
        (new / f"nan-{i}.json").write_text(json.dumps(good(peak_host_rss_bytes=float("nan"))))
    return root


def test_compare_with_unreadable_records_exits_3_saying_how_many(tmp_path, capsys):
    results = two_commits(tmp_path / "results", broken=2)
    assert main(["compare", "aaaa", "bbbb", "--results", str(results)]) == 3
    err = capsys.readouterr().err
    assert "2 record files could not be read" in err
    clean = two_commits(tmp_path / "clean", broken=0)
    assert main(["compare", "aaaa", "bbbb", "--results", str(clean)]) == 0


def test_report_names_the_unreadable_files_on_stderr(tmp_path, capsys):
    results = two_commits(tmp_path / "results", broken=1)
    assert main(["report", "--out", str(tmp_path / "report"), "--results", str(results)]) == 0
    err = capsys.readouterr().err
    assert "nan-0.json" in err and "not a finite number" in err
    assert "1 files skipped or partly read" in err
