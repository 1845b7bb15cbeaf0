import json

import pytest

from membench.records import Cell, CorruptRecordError, Record, read_record

CELL = Cell("resnet50", "torch", "baseline", 2, "smoke")


def test_record_round_trip(store):
    record = Record(CELL, "ok", metrics={"peak_host_rss_bytes": 123.0}, step_times=[0.1, 0.2])
    store.put(record)
    assert store.get(CELL) == record
    assert list(store.records()) == [record]


def test_missing_record_is_none(store):
    assert store.get(CELL) is None


@pytest.mark.parametrize(
    "content",
    ['{"cell": {"workload": "resnet50"', "[]", '{"status": "ok"}', "", '{"cell": 1}'],
)
def test_corrupt_record_is_reported_by_name(store, content):
    path = store.path(CELL)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(CorruptRecordError) as err:
        store.get(CELL)
    assert str(path) in str(err.value)


def test_unknown_status_is_corrupt(tmp_path):
    path = tmp_path / "r.json"
    data = Record(CELL, "ok").to_dict()
    data["status"] = "fine"
    path.write_text(json.dumps(data))
    with pytest.raises(CorruptRecordError, match="unknown status 'fine'"):
        read_record(path)


def test_record_of_another_cell_is_refused(store):
    other = Record(Cell("resnet50", "torch", "infer", 2, "smoke"), "ok")
    store.path(CELL).parent.mkdir(parents=True)
    store.path(CELL).write_text(json.dumps(other.to_dict()))
    with pytest.raises(CorruptRecordError, match="expected"):
        store.get(CELL)


def test_put_leaves_no_temporary_files(store):
    store.put(Record(CELL, "ok"))
    assert [p.name for p in store.root.iterdir()] == [f"{CELL.key}.json"]
