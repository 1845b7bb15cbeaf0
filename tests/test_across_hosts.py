"""The same capacity search on two host kinds (analysis/across_hosts.py)."""

from __future__ import annotations

import json

from analysis.across_hosts import across_hosts, carried
from analysis.capacity_loader import load_capacity
from membench import paths

from .test_decision import search
from .test_report import GIB


def runs(fitted: dict[int, int], over: int) -> list[dict]:
    """Probes: each batch measured 3 times, fitting in `fitted[batch]` of them; `over`
    measured once, over the budget."""
    probes = [{"batch_size": b, "repeat": k + 1, "fits": k < n, "status": "ok"}
              for b, n in fitted.items() for k in range(3)]  # fmt: skip
    return probes + [{"batch_size": over, "repeat": 1, "fits": False, "status": "ok"}]


def write(root, machine: str, found: list[dict]) -> None:
    run = paths.capacity_run(machine, "smoke", 2 * GIB, "0" * 40, root)
    run.mkdir(parents=True)
    (run / paths.CAPACITY_FILE).write_text(json.dumps(found))


def test_an_answer_stands_beside_the_same_search_on_another_host_kind(tmp_path):
    """torch's baseline answers 22 on one host kind, where 23 and 24 fitted every run (put
    down by the noise rule), and 24 on the other: bands 22-24 and 24, overlapping, +9.1%.
    Jittor's answers 30 and 24 (no band): -20%, no overlap. A search made on one host kind
    only, or that ended at the search's maximum, has no row."""
    root = tmp_path / "results"
    here, there = "amd-epyc-f26m2", "amd-epyc-f25m17"
    write(root, here, [
        {**search("baseline", 22, 5.0), "probes": runs({22: 3, 23: 3, 24: 3}, 25),
         "repeats": 3},
        {**search("baseline", 30, 5.0, framework="jittor"), "probes": runs({30: 3}, 31),
         "repeats": 3},
        {**search("infer", 40, 9.0), "smallest_non_fit": None},
        search("checkpoint", 14, 4.0),
    ])  # fmt: skip
    write(root, there, [
        {**search("baseline", 24, 5.0), "probes": runs({24: 3, 25: 2}, 26), "repeats": 3},
        {**search("baseline", 24, 5.0, framework="jittor"), "probes": runs({24: 3}, 25),
         "repeats": 3},
        {**search("infer", 40, 9.0), "smallest_non_fit": None},
    ])  # fmt: skip
    capacity = load_capacity(root).frame
    table = across_hosts(capacity, here).set_index(["framework", "strategy"])
    assert list(table.index) == [("jittor", "baseline"), ("torch", "baseline")]
    torch = table.loc[("torch", "baseline")]
    assert (torch["largest batch here"], torch["every run fitted here"]) == (22, 24)
    assert (torch["largest batch there"], torch["every run fitted there"]) == (24, 24)
    assert torch["on"] == there and torch["difference %"] == 9.1
    assert torch["bands overlap"] == "yes"
    jittor = table.loc[("jittor", "baseline")]
    assert jittor["difference %"] == -20.0 and jittor["bands overlap"] == "no"
    assert carried(table.reset_index()) == (
        "2 searches made on both: 0 with the same answer, 1 whose bands overlap; the largest "
        f"difference -20.0% (jittor baseline, resnet50 within 2 GiB: 30 here, 24 on {there})."
    )
    mirrored = across_hosts(capacity, there).set_index(["framework", "strategy"])
    assert mirrored.loc[("torch", "baseline"), "difference %"] == -8.3
    assert across_hosts(capacity, "another").empty and carried(across_hosts(capacity, "x")) == ""
