"""The decision table (analysis/decision.py) and what it reads: capacity files old and new,
strategy families, the support matrix and the names people read."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis.capacity_loader import load_capacity, load_capacity_probes
from analysis.decision import decision_table, unsearched
from analysis.decision_terms import BEST, LARGEST, MARGIN, NOTE, SPEED, at_maximum
from analysis.decision_text import SAME_NOTE, by_mode, formatted, note, notes_once
from analysis.families import family, family_colours, strategy_order
from analysis.labels import column_name, for_people
from analysis.loader import latest, load, recorded_mode
from analysis.modes import mode_by_name, modes
from analysis.search_digest import (
    answers_against_noise,
    capacity_error,
    capacity_reference,
    capacity_searches,
    probes_per_search,
)
from analysis.support import support_matrix
from membench import paths
from membench.records import UNSETTLED, ProbeBudget

from .test_report import GIB, MACHINE, OOM_REASON, record, write_results, write_store


def search(strategy: str, largest: int, speed: float, framework: str = "torch",
           status: str = "ok", reason: str = "", **new: object) -> dict:  # fmt: skip
    """One search as `membench capacity` writes it; `new` holds the model-guided fields."""
    return {
        "workload": "resnet50", "framework": framework, "strategy": strategy,
        "preset": "smoke", "budget_bytes": 2.0 * GIB, "budget_layer": "peak_host_rss_bytes",
        "budget_enforced": False, "note": "CPU: no memory limit was imposed",
        "largest_fit": largest, "smallest_non_fit": largest + 1 if largest else 1,
        "status": status, "reason": reason, "probes": [{"batch_size": 1}] * 3,
        "throughput_at_largest_fit": speed, "fit_fixed_bytes": None,
        "fit_per_sample_bytes": None, "fit_r2": None, **new,
    }  # fmt: skip


def write_capacity(results, searches: list[dict]) -> None:
    run = paths.capacity_run(MACHINE, "smoke", 2 * GIB, "0" * 40, results)
    run.mkdir(parents=True)
    (run / paths.CAPACITY_FILE).write_text(json.dumps(searches))


@pytest.fixture
def results(tmp_path):
    """The test result set (baseline, checkpoint, amp-bf16 at batches 2 and 4) with searches
    of the old format (torch) and the new one (jax, which has no records)."""
    root = write_results(tmp_path / "results")
    write_capacity(root, [
        search("baseline", 10, 5.0),
        search("checkpoint", 14, 4.0),
        search("amp-bf16", 12, 5.0),  # ties baseline's samples/s: the larger batch wins
        search("expandable-segments", 0, math.nan, status="unsupported",
               reason="no CUDA allocator here"),
        {**search("infer", 40, 50.0), "smallest_non_fit": None},  # at the search's maximum
        search("baseline", 8, 3.0, framework="jax", predicted_batch=9,
               prediction_basis="calibrated", search="guided", bisection_probes=7),
        search("checkpoint", 10, 2.0, framework="jax", predicted_batch=10,
               prediction_basis="calibrated", search="guided", bisection_probes=8),
        # searched, and not even batch 1 fits (JAX's ResNet-50 amp-fp16 within 960 MiB)
        search("amp-fp16", 0, math.nan, framework="jax", predicted_batch=64,
               prediction_basis="calibrated", search="guided", bisection_probes=1),
    ])  # fmt: skip
    return root


def the_table(results) -> pd.DataFrame:
    view = latest(load(results).frame)
    tables = decision_table(view, load_capacity(results).frame)
    assert list(tables) == [(MACHINE, "resnet50", "smoke", 2.0)]
    return tables[(MACHINE, "resnet50", "smoke", 2.0)]


def test_capacity_files_old_and_new_load_alike(results):
    frame = load_capacity(results).frame.set_index(["framework", "strategy"])
    assert math.isnan(frame.loc[("torch", "baseline"), "predicted_batch"])  # old format
    assert frame.loc[("torch", "baseline"), "search"] == ""
    assert frame.loc[("jax", "baseline"), "predicted_batch"] == 9
    assert frame.loc[("jax", "baseline"), "bisection_probes"] == 7
    assert frame.loc[("jax", "checkpoint"), "search"] == "guided"


def test_the_decision_table_answers_from_capacity_and_the_presets_cells(results):
    table = the_table(results).set_index(["framework", "strategy"])
    assert table.loc[("torch", "checkpoint"), LARGEST] == 14
    assert table.loc[("torch", "checkpoint"), SPEED] == 4.0
    # the records (test_report.record): checkpoint's memory is 0.7x baseline's at batch 4,
    # host RSS = 0.5 + 0.1 x batch x factor GiB; its steps take 1/0.7 as long
    change = ((0.5 + 0.4 * 0.7) / (0.5 + 0.4) - 1) * 100  # negative: less memory
    assert table.loc[("torch", "checkpoint"), "memory vs baseline at batch 4"] == pytest.approx(
        change
    )
    assert table.loc[("torch", "checkpoint"), "speed vs baseline at batch 4"] == pytest.approx(0.7)
    # no record of jax: nothing to compare, the searches still answer
    assert math.isnan(table.loc[("jax", "checkpoint"), "memory vs baseline at batch 4"])
    assert table.loc[("jax", "checkpoint"), LARGEST] == 10
    # a search that did not run says why, and has no batch
    row = table.loc[("torch", "expandable-segments")]
    assert row[NOTE] == "unsupported: no CUDA allocator here" and pd.isna(row[LARGEST])
    # an answer at the search's largest batch says it is a lower bound; a bracketed one is bare
    assert table.loc[("torch", "infer"), NOTE] == at_maximum(40)
    assert at_maximum(40) == "search's maximum reached (>= 40)"
    assert table.loc[("torch", "checkpoint"), NOTE] == ""
    # a search in which nothing fits answers 0 and says so (it once read "-" and "ok"), and
    # that its baseline fits more (these old searches kept no costs to say why)
    none = table.loc[("jax", "amp-fp16")]
    assert none[LARGEST] == 0 and none[BEST] == "" and math.isnan(none[SPEED])
    assert none[NOTE] == (
        "none fits: batch 1, the smallest tried, is over the budget; baseline fits 8: no cost "
        "of both to compare (no line their probes pin, no peak at an answer)"
    )


def test_an_odd_rows_note_compares_lines_over_every_budgets_probes(tmp_path):
    """JAX's checkpoint fits fewer than its baseline at 2 and 3 GiB. Its note compares each
    strategy's line over its probes at both budgets (baseline 500 MiB + 100 a sample,
    checkpoint 700 + 90, less a 50 MiB noise at two probes), not the lines over one
    search's probes, which that noise tilts (the baseline's at 2 GiB alone give -250 MiB
    fixed and 150 a sample); with one budget searched, the search's own fit stands."""
    from analysis.decision import with_cost_lines
    from membench.fitting import linear_fit

    mib = 2**20

    def probes(fixed: float, per: float, batches: list[int], noise: dict[int, float]) -> list:
        return [{"batch_size": b, "repeat": 1, "fits": True, "status": "ok",
                 "peak_bytes": (fixed + per * b + noise.get(b, 0)) * mib}
                for b in batches]  # fmt: skip

    def searches(budget_gib: float, base: list, ckpt: list, answers: tuple[int, int]) -> list:
        def own(found: list) -> dict:  # the line over the search's own probes, as it writes it
            fixed, per, r2 = linear_fit([p["batch_size"] for p in found],
                                        [p["peak_bytes"] for p in found])  # fmt: skip
            return {"probes": found, "fit_fixed_bytes": fixed, "fit_per_sample_bytes": per,
                    "fit_r2": r2}  # fmt: skip

        mine = {"framework": "jax", "budget_bytes": budget_gib * GIB}
        return [
            {**search("baseline", answers[0], 3.0, **mine), **own(base)},
            {**search("checkpoint", answers[1], 2.0, **mine), **own(ckpt)},
        ]

    root = write_results(tmp_path / "results")
    at_2 = searches(2, probes(500, 100, [14, 15, 16], {14: -50, 16: 50}),
                    probes(700, 90, [13, 14], {}), (15, 14))  # fmt: skip
    at_3 = searches(3, probes(500, 100, [25, 26], {}), probes(700, 90, [26, 27], {}), (25, 26))
    for budget, found in ((2, at_2), (3, at_3)):
        run = paths.capacity_run(MACHINE, "smoke", budget * GIB, "0" * 40, root)
        run.mkdir(parents=True)
        (run / paths.CAPACITY_FILE).write_text(json.dumps(found))
    capacity = load_capacity(root).frame
    lines = with_cost_lines(capacity).set_index(["strategy", "budget_gib"])
    assert lines.loc[("baseline", 2.0), "line_fixed_mib"] == pytest.approx(485.76, abs=0.01)
    assert lines.loc[("baseline", 2.0), "fit_per_sample_mib"] == pytest.approx(150)
    assert lines.loc[("checkpoint", 3.0), "line_per_sample_mib"] == pytest.approx(90)
    assert lines.loc[("baseline", 2.0), "line_budgets"] == 2
    tables = decision_table(latest(load(root).frame), capacity)
    row = tables[(MACHINE, "resnet50", "smoke", 2.0)].set_index("strategy").loc["checkpoint"]
    assert row[NOTE].startswith(
        "fits 14, baseline 15: fixed 700 MiB vs baseline 486 MiB; 90.0 MiB/sample vs 100.7 "
        "(lines over 2 budgets' probes)"
    )
    alone = capacity[capacity["budget_gib"] == 2.0]
    assert with_cost_lines(alone)["line_per_sample_mib"].isna().all()
    tables = decision_table(latest(load(root).frame), alone)  # one budget: the own fits stand
    row = tables[(MACHINE, "resnet50", "smoke", 2.0)].set_index("strategy").loc["checkpoint"]
    assert "90.0 MiB/sample vs 150.0" in row[NOTE] and "lines over" not in row[NOTE]


def test_each_framework_has_one_best_training_option_by_the_stated_rule(results):
    table = the_table(results)
    best = table[table[BEST] == "best"].set_index("framework")["strategy"]
    # torch: baseline and amp-bf16 tie at 5 samples/s; amp-bf16 fits the larger batch.
    # jax: baseline (3 samples/s) beats checkpoint (2). infer is faster but not training.
    assert best.to_dict() == {"jax": "baseline", "torch": "amp-bf16"}


def test_a_speed_within_two_percent_of_the_fastest_is_no_ranking():
    """Speeds of different runs 1.4% apart tie: the larger batch wins, then the table's order
    (baseline first); 4.6% apart, the faster wins."""
    from analysis.decision_evidence import best_marks
    from analysis.decision_terms import PART, TRAINING

    rows = [("jax", "baseline", 26, 21.7), ("jax", "mmap-threshold", 26, 22.0),
            ("jax", "accumulate-4", 84, 21.6), ("jittor", "baseline", 31, 15.1),
            ("jittor", "mmap-threshold", 31, 15.8), ("torch", "baseline", 22, 26.0),
            ("torch", "mmap-threshold", 29, 25.6)]  # fmt: skip
    table = pd.DataFrame(rows, columns=["framework", "strategy", LARGEST, SPEED])
    table[PART] = TRAINING
    best = table[best_marks(table) == "best"].set_index("framework")["strategy"].to_dict()
    assert best == {"jax": "accumulate-4", "jittor": "mmap-threshold", "torch": "mmap-threshold"}
    table.loc[2, SPEED] = 20.0  # accumulate-4 out of the tie: baseline, first in the order
    assert (
        table[best_marks(table) == "best"].set_index("framework")["strategy"]["jax"] == "baseline"
    )


def test_training_and_inference_rows_apart(results):
    parts = by_mode(formatted(the_table(results)))
    assert list(parts) == ["training", "inference"]
    assert list(parts["inference"]["strategy"]) == ["infer"]
    assert "infer" not in set(parts["training"]["strategy"])
    assert BEST not in parts["inference"].columns
    shown = parts["training"].set_index(["framework", "strategy"])
    # one sign everywhere: -13% is less memory; speed said as it reads
    # the header names the layer the saving is on (the budget's may be another)
    memory = "memory vs baseline at batch 4 (peak host RSS)"
    assert shown.loc[("torch", "checkpoint"), memory] == "-13%"
    assert shown.loc[("torch", "checkpoint"), "speed vs baseline at batch 4"] == "1.43x slower"
    assert shown.loc[("torch", "amp-bf16"), memory] == "-9%"
    assert shown.loc[("torch", "expandable-segments"), LARGEST] == "-"


def test_the_model_error_and_probe_counts_come_from_guided_searches_only(results):
    capacity = load_capacity(results).frame
    error = capacity_error(capacity).set_index("framework")
    assert list(error.index) == ["jax"]  # torch's old searches have no prediction
    assert error.loc["jax", "prediction"] == "calibrated model"
    assert error.loc["jax", "median error %"] == pytest.approx(6.2)  # (12.5% + 0%) / 2
    assert error.loc["jax", "worst error %"] == 12.5
    assert error.loc["jax", "budget layer"] == "peak host RSS"  # the metric's label, not its key
    probes = probes_per_search(capacity).set_index("framework")
    assert probes.loc["jax", "guided median"] == 3 and probes.loc["jax", "bisection worst"] == 8


def test_a_prediction_is_never_scored_against_its_own_step_nor_a_lower_bound(tmp_path):
    """XLA's guess ran a step at batches 4 and 16: an answer (or next batch) there is left
    out of its error and counted; a search that reached its maximum is no verified answer;
    each kind of guess is scored apart; a repeated boundary is counted on both sides."""
    root = tmp_path / "results"
    xla = {"prediction_basis": "XLA compiled at batch 4, 16", "search": "guided",
           "bisection_probes": 6, "prediction_measured_batches": [4, 16]}  # fmt: skip
    repeated = [{"batch_size": 8, "repeat": 1}, {"batch_size": 8, "repeat": 2},
                {"batch_size": 9, "repeat": 1}, {"batch_size": 9, "repeat": 2}]  # fmt: skip
    write_capacity(root, [
        search("baseline", 10, 5.0, framework="jax", predicted_batch=11, **xla),
        search("checkpoint", 15, 4.0, framework="jax", predicted_batch=30, **xla),  # 16 next
        {**search("infer", 40, 9.0, framework="jax", predicted_batch=80, **xla),
         "smallest_non_fit": None},
        {**search("amp-bf16", 8, 5.0, framework="jax", predicted_batch=6,
                  prediction_basis="spec-only", search="guided", bisection_probes=5),
         "probes": repeated},
        search("accumulate-4", 20, 3.0, framework="torch", predicted_batch=24, search="guided",
               prediction_basis="calibrated on intel-xeon-2core-24gib (torch 2.13.0+cpu)",
               bisection_probes=5),
    ])  # fmt: skip
    capacity = load_capacity(root).frame
    error = capacity_error(capacity).set_index("prediction")
    assert error.loc["XLA compiled", "searches"] == 1  # baseline only
    assert error.loc["XLA compiled", "worst error %"] == 10.0
    assert error.loc["XLA compiled", "left out (own input)"] == 1
    assert error.loc["spec-only model", "worst error %"] == 25.0
    assert error.loc["model calibrated on another host kind", "worst error %"] == 20.0
    probes = probes_per_search(capacity)
    assert probes.set_index("framework").loc["jax", "bisection worst"] == 7  # 5 + 2 repeats


def test_the_models_guess_now_is_scored_apart_and_never_left_out_for_a_step(tmp_path):
    """Beside the first guess, the model's guess with today's calibrations: scored on every
    bracketed answer, also where XLA's first guess ran a step at the next batch (the model
    runs none), grouped by whose constants it used; a search without one is not scored."""
    root = tmp_path / "results"
    xla = {"prediction_basis": "XLA compiled", "search": "guided", "bisection_probes": 6,
           "prediction_measured_batches": [4, 16]}  # fmt: skip
    write_capacity(root, [
        search("checkpoint", 15, 4.0, framework="jax", predicted_batch=30, model_batch=12,
               model_basis="calibrated (jax 0.7.1)", **xla),  # 16: XLA's own step
        search("baseline", 10, 5.0, predicted_batch=20, prediction_basis="spec-only",
               model_batch=11, model_basis="calibrated (torch 2.13.0+cpu)"),
        search("amp-bf16", 20, 5.0, predicted_batch=20, prediction_basis="spec-only",
               model_batch=25, model_basis="calibrated (torch 2.13.0+cpu, baseline's constants)"),
        search("infer", 40, 5.0, predicted_batch=20, prediction_basis="spec-only"),
    ])  # fmt: skip
    capacity = load_capacity(root).frame
    first = capacity_error(capacity).set_index(["prediction", "framework"])
    assert first.loc[("XLA compiled", "jax"), "searches"] == 0  # left out: its own step
    assert first.loc[("spec-only model", "torch"), "searches"] == 3
    model = capacity_error(capacity, "model").set_index(["prediction", "framework"])
    own = model.loc["calibrated model"]
    assert own.loc["jax", "searches"] == 1 and own.loc["jax", "worst error %"] == 20.0
    assert own.loc["torch", "searches"] == 1  # infer had no model guess
    assert own.loc["torch", "worst error %"] == 10.0
    assert own.loc["torch", "worst at"] == "resnet50 torch baseline 2 GiB: 11 for 10"
    # the all-frameworks row names the worst of all: jax's 12 for 15 (20%)
    worst = model.loc[("calibrated model", "all"), "worst at"]
    assert worst == "resnet50 jax checkpoint 2 GiB: 12 for 15"
    assert first.loc[("XLA compiled", "jax"), "worst at"] == ""  # none scored
    # amp-bf16 had no fit of its own: scored apart
    borrowed = model.loc[("calibrated model, another strategy's constants", "torch")]
    assert borrowed["searches"] == 1 and borrowed["worst error %"] == 25.0
    assert "left out (own input)" not in model.columns
    titles = list(capacity_searches(capacity))
    assert titles[1].startswith("The memory model's capacity error with today's calibrations")


def test_a_guess_is_also_scored_against_the_answers_noise_band(tmp_path):
    """JAX's U-Net amp-bf16 within 1.25 GiB: 11, 12 and 13 fitted all 3 runs and were put down
    by the noise rule, so the answer is 10 and its band 10-13; XLA's 15 is 50% off the answer
    and 2/13 beyond the band; a guess inside the band is 0 beyond it, one under it is scored
    against the answer; 14 fitted 2 of 3 runs and is no part of the band."""
    from analysis.capacity_loader import fitted_every_run
    from analysis.search_digest import beyond_noise
    from membench.records import CapacityResult

    runs = {10: [True] * 3, 11: [True] * 3, 12: [True] * 3, 13: [True] * 3,
            14: [False, True, True], 15: [False]}  # fmt: skip
    probes = [{"batch_size": b, "repeat": k + 1, "fits": f}
              for b, fitted in runs.items() for k, f in enumerate(fitted)]  # fmt: skip
    root = tmp_path / "results"
    xla = {"prediction_basis": "XLA compiled", "search": "guided", "bisection_probes": 8,
           "prediction_measured_batches": [4, 16], "repeats": 3}  # fmt: skip
    write_capacity(root, [
        {**search("amp-bf16", 10, 3.0, framework="jax", predicted_batch=15, **xla),
         "probes": probes},
        {**search("baseline", 10, 3.0, framework="jax", predicted_batch=12, **xla),
         "probes": probes},
        {**search("checkpoint", 10, 3.0, framework="jax", predicted_batch=8, **xla),
         "probes": probes},
    ])  # fmt: skip
    capacity = load_capacity(root).frame.set_index("strategy")
    assert set(capacity["fitted_every_run"]) == {13}
    band = beyond_noise(capacity["predicted_batch"], capacity["largest_batch"],
                        capacity["fitted_every_run"])  # fmt: skip
    assert band["amp-bf16"] == pytest.approx(200 / 13)
    assert band["baseline"] == 0 and band["checkpoint"] == pytest.approx(20.0)
    error = capacity_error(capacity.reset_index()).set_index("prediction")
    assert error.loc["XLA compiled", "worst error %"] == 50.0
    assert error.loc["XLA compiled", "worst at"] == "resnet50 jax amp-bf16 2 GiB: 15 for 10"
    assert error.loc["XLA compiled", "worst beyond noise %"] == 20.0
    single = CapacityResult("resnet50", "torch", "baseline", "smoke", GIB, "x", False, "", 10,
                            11, "ok", "", [{"batch_size": 10, "fits": True}])  # fmt: skip
    assert fitted_every_run(single) == 10  # one run a batch: the answer is its own band


def test_the_answers_against_their_noise_are_counted_per_run_and_per_rule(tmp_path):
    """A run before the rule publishes one answer within its noise (margin 5 MiB, spread 9);
    one of the rule has none; a search without repeats is not counted."""
    mib = 2**20

    def margin(strategy: str, spare: float, spread: float, **rule: object) -> dict:
        return search(strategy, 10, 5.0, repeats=3, margin_bytes=spare * mib,
                      spread_bytes=spread * mib, **rule)  # fmt: skip

    before, after = tmp_path / "before", tmp_path / "after"
    write_capacity(before, [margin("baseline", 5, 9), margin("checkpoint", 30, 9),
                            search("amp-bf16", 12, 5.0)])  # fmt: skip
    write_capacity(after, [margin("baseline", 12, 9, noise_room=True),
                           margin("checkpoint", 30, 9, noise_room=True)])  # fmt: skip
    counted = [answers_against_noise(load_capacity(r).frame) for r in (before, after)]
    assert counted[0].iloc[0][["rule", "answers", "margin >= spread", "within noise"]].tolist() == [
        "every repeat fits",
        2,
        1,
        1,
    ]
    assert counted[1].iloc[0][["rule", "answers", "margin >= spread", "within noise"]].tolist() == [
        "margin >= spread",
        2,
        2,
        0,
    ]
    # a summary page's digest: the runs summed per preset and rule (two runs of one rule here)
    runs = [load_capacity(r).frame for r in (before, after, after)]
    runs[1] = runs[1].assign(run="smoke-2gib-111111111111")
    runs[2] = runs[2].assign(run="smoke-2gib-222222222222", workload="transformer")
    summed = answers_against_noise(pd.concat(runs, ignore_index=True), by_rule=True)
    assert summed.values.tolist() == [
        ["smoke", "every repeat fits", 1, "resnet50", 2, 1, 1],
        ["smoke", "margin >= spread", 2, "resnet50, transformer", 4, 4, 0],
    ]


def test_the_later_run_wins_whatever_its_folder_name_says(results):
    """Two runs of the same searches: the one measured later answers, though its folder (named
    by its commit's hash) sorts first."""
    view = latest(load(results).frame)
    capacity = load_capacity(results).frame
    earlier = capacity.assign(run="smoke-2gib-ffffffffffff", run_at="2026-01-01T00:00:00")
    later = capacity.assign(run="smoke-2gib-000000000000", run_at="2026-02-01T00:00:00")
    earlier.loc[earlier["strategy"] == "checkpoint", "largest_batch"] = 99
    for runs in ([earlier, later], [later, earlier]):
        tables = decision_table(view, pd.concat(runs, ignore_index=True))
        table = tables[(MACHINE, "resnet50", "smoke", 2.0)].set_index(["framework", "strategy"])
        assert table.loc[("torch", "checkpoint"), LARGEST] == 14


def test_the_capacity_reference_names_each_searchs_run_and_the_one_its_table_shows(results):
    """A search repeated in two runs is two rows of the reference, oldest first, each with the
    commit that measured it; the decision table's is marked (a reader saw 31 and 24 for one
    search and could not tell which the table shows)."""
    capacity = load_capacity(results).frame
    earlier = capacity.assign(run="smoke-2gib-ffffffffffff", run_at="2026-01-01T00:00:00")
    later = capacity.assign(run="smoke-2gib-000000000000", run_at="2026-02-01T00:00:00")
    earlier.loc[earlier["strategy"] == "checkpoint", "largest_batch"] = 99
    reference = capacity_reference(pd.concat([later, earlier], ignore_index=True))
    rows = reference[(reference["framework"] == "torch") & (reference["strategy"] == "checkpoint")]
    assert rows[["measured_by", "largest_batch", "in_decision_table"]].values.tolist() == [
        ["ffffffffffff", 99, ""],
        ["000000000000", 14, "yes"],
    ]


def test_a_preset_without_cells_to_compare_has_no_comparison_columns(results):
    """cpu-capacity measures searches only: no empty memory/speed vs baseline columns, and
    the note says why."""
    view = latest(load(results).frame)
    tables = decision_table(view.iloc[0:0], load_capacity(results).frame)
    table = tables[(MACHINE, "resnet50", "smoke", 2.0)]
    assert not [c for c in table.columns if "vs baseline" in c]
    assert "No memory or speed vs baseline" in note(table)
    assert "at batch 4" in note(the_table(results))


def test_no_capacity_search_no_table():
    assert decision_table(pd.DataFrame(), pd.DataFrame()) == {}


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [("baseline", "baseline"), ("amp-bf16", "precision"), ("tf32", "precision"),
     ("amp-bf16-checkpoint", "checkpointing"), ("accumulate-4-scan", "accumulation"),
     ("compile", "compile & kernels"), ("fused-attention-bf16", "precision"),
     ("hygiene-2", "allocator & host"), ("mmap-threshold", "allocator & host"),
     ("infer-mmap-threshold", "inference"), ("fsdp-zero2", "sharding"), ("zero1", "sharding"),
     ("infer-half", "inference"), ("two-models-resident", "inference"),
     ("something-new", "other")],
)  # fmt: skip
def test_families_from_names(strategy, expected):
    assert family(strategy) == expected
    assert mode_by_name(strategy) == ("infer" if expected == "inference" else "train")


def test_a_row_trains_by_the_mode_its_record_stores_and_by_its_name_only_without_one(results):
    rows = pd.DataFrame({
        "strategy": ["infer-half", "something-new", "baseline", "two-models-resident"],
        "mode": ["train", "infer", "", math.nan],
    })  # fmt: skip
    assert list(modes(rows)) == ["train", "infer", "train", "infer"]
    # the loader reads the mode a record stores: its strategy notes', else its prediction's
    assert recorded_mode({"strategy_notes": {"mode": "infer"}, "prediction": {}}) == "infer"
    assert recorded_mode({"prediction": {"mode": "train"}}) == "train"
    assert recorded_mode({"strategy_notes": {"device": "cpu"}}) == ""
    # the test records store none: their rows and the searches answered from them go by name
    frame = load(results).frame
    assert set(frame["mode"]) == {""}
    assert set(load_capacity(results).frame["mode"]) == {""}


def test_strategies_ordered_by_family_and_coloured_by_it():
    names = ["infer", "checkpoint", "amp-fp16", "baseline", "amp-bf16"]
    assert strategy_order(names) == ["baseline", "amp-bf16", "amp-fp16", "checkpoint", "infer"]
    colours = family_colours(names)
    red = [colours["amp-bf16"], colours["amp-fp16"]]
    assert red[0] != red[1] and all(c[0] > c[2] for c in red)  # two shades of red
    assert colours["baseline"] == (0.0, 0.0, 0.0)


def test_column_names_for_people():
    assert column_name("fit_fixed_mib") == "fixed MiB"
    assert column_name("reference_max_rss_mib") == "reference max RSS MiB"
    frame = for_people(pd.DataFrame({"batch_size": [1], "metric": ["peak_host_rss_bytes"]}))
    assert list(frame.columns) == ["batch", "metric"] and frame.loc[0, "metric"] == "peak host RSS"


def test_the_support_matrix_tells_refused_runs_and_partly(tmp_path):
    cells = [record("baseline", b) for b in (2, 4)]
    cells += [record("accumulate-4", 2, "unsupported", "batch 2 does not split"),
              record("accumulate-4", 4)]  # fmt: skip
    cells += [record("compile", b, "unsupported", "no compiler") for b in (2, 4)]
    write_store(tmp_path / "records" / MACHINE / "smoke-0", cells)
    matrix = support_matrix(latest(load(tmp_path).frame)).set_index("strategy")
    assert matrix["torch"].to_dict() == {
        "baseline": "runs", "accumulate-4": "partly", "compile": "refused",
    }  # fmt: skip


def test_a_note_is_said_once_above_tables_with_the_same_columns():
    plain, margined = pd.DataFrame(columns=[LARGEST]), pd.DataFrame(columns=[LARGEST, MARGIN])
    assert note(plain) != note(margined)
    assert notes_once([plain, plain, margined, margined, margined, plain]) == [
        note(plain), SAME_NOTE, note(margined), SAME_NOTE, SAME_NOTE, note(plain),
    ]  # fmt: skip


def torch_and_jax_searched(tmp_path) -> tuple[pd.DataFrame, tuple]:
    """A machine's ResNet-50 baselines searched in torch and JAX: its capacity frame and the
    key of its one decision table."""
    root = write_results(tmp_path / "results")
    write_capacity(root, [
        search("baseline", 10, 5.0), search("baseline", 12, 4.0, framework="jax"),
    ])  # fmt: skip
    capacity = load_capacity(root).frame
    return capacity, next(iter(decision_table(latest(load(root).frame), capacity)))


def test_a_framework_searched_elsewhere_but_not_at_this_budget_is_named(tmp_path):
    """torch's U-Net at 1.25 GiB alone, where the preset searched JAX on another workload: the
    table says JAX was not searched there, rather than leaving its absence to be read."""
    capacity, key = torch_and_jax_searched(tmp_path)
    assert unsearched(capacity, key) == ""
    torch_only = capacity[capacity["framework"] == "torch"].assign(workload="unet3d")
    both = pd.concat([capacity, torch_only])
    assert unsearched(both, (*key[:1], "unet3d", *key[2:])) == (
        "Not searched here: jax (searched for resnet50 only); no row here is no answer."
    )
    # a framework with rows here lacking one that the preset searched for it elsewhere (on
    # ResNet-50): JAX's baseline, torch's inference
    jax_infer = torch_only.assign(framework="jax", strategy="infer")
    some = pd.concat([both, jax_infer, capacity.assign(strategy="infer")])
    assert unsearched(some, (*key[:1], "unet3d", *key[2:])) == (
        "Not searched here: jax baseline (searched for resnet50 only); torch infer (searched "
        "for resnet50 only); no row here is no answer."
    )
    # a strategy no framework has here, searched for torch on another workload only
    mmap = capacity[capacity["framework"] == "torch"].assign(strategy="mmap-threshold")
    # and one the preset leaves out for it elsewhere is not one it searched
    left = capacity[capacity["framework"] == "torch"].assign(strategy="amp-fp16", status="left-out")
    assert unsearched(pd.concat([some, mmap, left]), (*key[:1], "unet3d", *key[2:])) == (
        "Not searched here: jax baseline (searched for resnet50 only); torch mmap-threshold, "
        "infer (searched for resnet50 only); no row here is no answer."
    )


def test_a_strategy_one_framework_has_here_and_another_never_searched_is_named(tmp_path):
    """The H200's ResNet-50: torch searched with amp-bf16, JAX with its baseline alone; JAX's
    missing amp-bf16 row is named as never searched, not left to be read as not fitting."""
    capacity, key = torch_and_jax_searched(tmp_path)
    amp = capacity[capacity["framework"] == "torch"].assign(strategy="amp-bf16")
    assert unsearched(pd.concat([capacity, amp]), key) == (
        "Never searched by this preset on this machine: jax amp-bf16 (no answer either way)."
    )


def test_a_strategy_the_preset_searched_on_another_machine_only_is_named(tmp_path):
    """A host whose searches predate a strategy the preset gained (mmap-threshold, searched on
    another host since): its table says the strategy was never searched there, and names no
    strategy this host searched elsewhere, none left out, and no framework without a row."""
    capacity, key = torch_and_jax_searched(tmp_path)
    other = capacity.assign(machine="another-host")
    everywhere = pd.concat([
        capacity, other, other.assign(strategy="mmap-threshold"),
        other[other["framework"] == "torch"].assign(strategy="infer-mmap-threshold"),
        other.assign(strategy="amp-fp16", status="left-out"),
        # a framework with no row in this table: not named
        other.assign(framework="jittor", strategy="accumulate-4"),
    ])  # fmt: skip
    assert unsearched(capacity, key) == ""  # this machine's searches alone: as before
    assert unsearched(everywhere, key) == (
        "Never searched on this machine: jax mmap-threshold; torch mmap-threshold, "
        "infer-mmap-threshold (this preset has searches of them on another machine: no row "
        "here is no answer)."
    )
    # searched here since (any workload or budget of this machine): not named
    since = pd.concat([capacity, capacity.assign(strategy="mmap-threshold", workload="unet3d")])
    assert unsearched(pd.concat([everywhere, since]), key) == (
        "Not searched here: jax mmap-threshold (searched for unet3d only); torch mmap-threshold "
        "(searched for unet3d only); no row here is no answer. Never searched on this machine: "
        "torch infer-mmap-threshold (this preset has searches of it on another machine: no row "
        "here is no answer)."
    )


def test_what_a_table_lacks_is_said_in_its_columns_as_above_paragraph(tmp_path):
    """The pages' wiring: under a table whose note is 'Columns as in the table above.', the
    sentence of what it lacks joins that paragraph (the summary's lines are counted)."""
    from analysis.page_parts import decision_sections

    root = write_results(tmp_path / "results")
    write_capacity(root, [
        search("baseline", 10, 5.0), search("baseline", 12, 4.0, framework="jax"),
    ])  # fmt: skip
    run = paths.capacity_run(MACHINE, "smoke", 3 * GIB, "0" * 40, root)
    run.mkdir(parents=True)
    larger = {**search("baseline", 20, 5.0), "budget_bytes": 3.0 * GIB}
    (run / paths.CAPACITY_FILE).write_text(json.dumps([larger]))
    capacity = load_capacity(root).frame
    lines = decision_sections(latest(load(root).frame), capacity, capacity)
    joined = [line for line in lines if line.startswith(SAME_NOTE)]
    assert joined == [
        f"{SAME_NOTE} Not searched here: jax (searched at 2 GiB only); no row here is no answer."
    ]


def test_a_fixed_mmap_threshold_is_set_beside_its_references_spread(tmp_path):
    """Each search that fixes glibc's threshold beside its reference's at the same budget:
    both answers and spreads; none where the reference is missing, unrepeated or has no
    answer, and not in the summary's digest."""
    from analysis.search_digest import capacity_searches, threshold_spread

    mib = 2**20
    root = write_results(tmp_path / "results")

    def repeated(strategy: str, largest: int, spread: float, framework: str = "torch") -> dict:
        # at cpu-capacity's U-Net budget, which rounding to one place would print as 1.2
        return search(strategy, largest, 5.0, framework, repeats=3, spread_bytes=spread * mib,
                      budget_bytes=1.25 * GIB)  # fmt: skip

    write_capacity(root, [
        repeated("baseline", 11, 164.0), repeated("mmap-threshold", 17, 1.3),
        repeated("infer", 143, 36.7), repeated("infer-mmap-threshold", 150, 0.5),
        {**search("baseline", 8, 3.0, "jax"), "budget_bytes": 1.25 * GIB},
        repeated("mmap-threshold", 9, 4.0, "jax"),
        repeated("infer", 0, 2.0, "jittor"), repeated("infer-mmap-threshold", 5, 1.0, "jittor"),
    ])  # fmt: skip
    capacity = load_capacity(root).frame
    table = threshold_spread(capacity)
    assert table[["framework", "reference", "threshold fixed"]].values.tolist() == [
        ["torch", "baseline", "mmap-threshold"], ["torch", "infer", "infer-mmap-threshold"],
    ]  # fmt: skip
    assert table[["reference's answer", "reference's spread MiB"]].values.tolist() == [
        [11, 164.0], [143, 36.7],
    ]  # fmt: skip
    assert table[["its answer", "its spread MiB"]].values.tolist() == [[17, 1.3], [150, 0.5]]
    assert table["budget GiB"].tolist() == [1.25, 1.25]
    titles = list(capacity_searches(capacity))
    assert any(t.startswith("glibc's mmap threshold") for t in titles)
    assert not any(t.startswith("glibc") for t in capacity_searches(capacity, digest=True))


SLOW = "3D convolutions run generic kernels"


def jittor_left_out(tmp_path) -> Path:
    """A results folder whose run searched torch's baseline and left Jittor's baseline,
    accumulate-4 and infer out (SLOW)."""
    root = write_results(tmp_path / "results")
    write_capacity(root, [
        search("baseline", 10, 5.0),
        *({**search(s, 0, None, "jittor", "left-out", SLOW), "probes": []}
          for s in ("infer", "baseline", "accumulate-4")),
    ])  # fmt: skip
    return root


def test_a_search_the_preset_leaves_out_is_said_under_the_table_not_as_a_row(tmp_path):
    """Jittor's U-Net, left out by the preset for its time: no row, and the sentence under the
    table gives the reason per framework, its strategies in the tables' order."""
    root, slow = jittor_left_out(tmp_path), SLOW
    capacity = load_capacity(root).frame
    tables = decision_table(latest(load(root).frame), capacity)
    ((key, table),) = tables.items()
    assert list(table["framework"]) == ["torch"]
    assert unsearched(capacity, key) == (
        f"Left out by this preset, so no row: jittor baseline, accumulate-4, infer ({slow})."
    )
    since = pd.concat([capacity, capacity[capacity["strategy"] == "infer"].assign(status="ok")])
    assert unsearched(since, key) == (
        f"Left out by this preset, so no row: jittor baseline, accumulate-4 ({slow}). Never "
        "searched by this preset on this machine: torch infer (no answer either way)."
    )  # a search of it since (the preset changed) is a row; torch's is not there
    # a run at another budget that searched torch alone records no left-out row: its table
    # says the same of Jittor, not that Jittor was "searched elsewhere"
    torch_at_3 = capacity[capacity["framework"] == "torch"].assign(budget_gib=3.0)
    assert unsearched(pd.concat([capacity, torch_at_3]), (*key[:3], 3.0)) == (
        f"Left out by this preset, so no row: jittor baseline, accumulate-4, infer ({slow})."
    )


def test_each_pair_is_spoken_of_as_its_latest_run_at_any_budget_has_it(tmp_path):
    """A preset that changed between runs: a pair is left out where its latest row, at any
    budget of the workload, is left out, and searched elsewhere where that row searched it,
    whatever the order of the runs; a reason reworded since is said once, as it is now."""
    root, slow = jittor_left_out(tmp_path), SLOW
    left = load_capacity(root).frame.assign(run="left", run_at="2026-02-01")
    key = (MACHINE, "resnet50", "smoke", 2.0)
    infer = left[left["strategy"] == "infer"].assign(status="ok", budget_gib=3.0, run="infer")
    # searched at 3 GiB first, left out since: left out, at the budget searched too
    earlier = pd.concat([left, infer.assign(run_at="2026-01-01")])
    said_left = (
        f"Left out by this preset, so no row: jittor baseline, accumulate-4, infer ({slow})."
    )
    assert unsearched(earlier, key) == said_left
    assert unsearched(earlier, (*key[:3], 3.0)) == (
        f"Left out by this preset, so no row: jittor baseline, accumulate-4 ({slow}). Not "
        "searched here: torch (searched at 2 GiB only); no row here is no answer."
    )  # its row at 3 GiB is shown there (the later run at 2 GiB did not search it)
    # left out first, searched since: named by its strategies as searched elsewhere, not
    # as a whole framework the table lacks
    later = pd.concat([left, infer.assign(run_at="2026-03-01")])
    assert unsearched(later, key) == (
        f"Left out by this preset, so no row: jittor baseline, accumulate-4 ({slow}). Not "
        "searched here: jittor infer (searched at 3 GiB only); no row here is no answer."
    )
    # the same pairs left out at another budget in an older run, in other words: once, as now
    worded = left.assign(budget_gib=1.0, run="worded", run_at="2026-01-01", reason="too slow")
    assert unsearched(pd.concat([worded, left]), key) == said_left
    # a strategy the preset leaves out here, searched for Jittor on another workload, is not
    # one this table lacks; the strategies Jittor has no row for here are (the baseline, a
    # row since, is not said left out: its run is the later one, whatever its name)
    baseline = left[left["strategy"] == "baseline"].assign(
        status="ok", run="a-now", run_at="2026-03-01"
    )
    elsewhere = left[left["strategy"].isin(["accumulate-4", "infer"])].assign(
        status="ok", workload="unet3d", run="other"
    )
    assert unsearched(pd.concat([left, baseline, elsewhere]), key) == (
        f"Left out by this preset, so no row: jittor accumulate-4, infer ({slow})."
    )


def test_a_table_and_its_sentence_speak_of_a_pair_by_one_rule(tmp_path):
    """A settled search wins over a newer unsettled one in the table and in the sentence under
    it alike: a pair left out, then stopped before it settled, is said left out, and not named
    as searched elsewhere while the table has no row of it."""
    root = jittor_left_out(tmp_path)
    capacity = load_capacity(root).frame.assign(run_at="2026-01-01")
    stopped = capacity[capacity["strategy"] == "infer"].assign(
        status=UNSETTLED, run="stopped", run_at="2026-02-01", reason="stopped before it settled"
    )
    both = pd.concat([capacity, stopped], ignore_index=True)
    ((key, table),) = decision_table(latest(load(root).frame), both).items()
    assert list(table["framework"]) == ["torch"]
    assert unsearched(both, key) == (
        f"Left out by this preset, so no row: jittor baseline, accumulate-4, infer ({SLOW})."
    )
    # stopped at another budget since: the preset searches the pair now, so this table,
    # which has no row of it, names it as searched elsewhere
    since = pd.concat([capacity, stopped.assign(budget_gib=3.0, run_at="2026-03-01")])
    assert unsearched(since, key) == (
        f"Left out by this preset, so no row: jittor baseline, accumulate-4 ({SLOW}). Not "
        "searched here: jittor infer (searched at 3 GiB only); no row here is no answer."
    )


def test_a_run_is_dated_once_per_machine_and_folder_and_by_its_writing_where_all_is_left_out(
    tmp_path,
):
    """A run whose searches are all left out has no probe to date it: the time its results
    were written does, so a preset that left a pair out after a search of it speaks of it as
    left out; a file written before that stamp dates as the oldest run. Folders of one name
    on two machines are two runs, each dated by its own."""
    root = write_results(tmp_path / "results")
    key = (MACHINE, "resnet50", "smoke", 2.0)

    def run(commit: str, searches: list[dict], machine: str = MACHINE) -> Path:
        folder = paths.capacity_run(machine, "smoke", 2 * GIB, commit, root)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / paths.CAPACITY_FILE).write_text(json.dumps(searches))
        return folder

    # a run that searched infer (its probe: 2026-01-01) and left the baseline out, in a file
    # written before the stamp: both rows take the run's one date
    searched = run("1" * 40, [
        search("infer", 4, 5.0, "jittor"),
        {**search("baseline", 0, None, "jittor", "left-out", SLOW), "probes": []},
    ])  # fmt: skip
    write_store(searched / paths.PROBES, [record("infer", 4, framework="jittor")])
    left = {**search("infer", 0, None, "jittor", "left-out", SLOW), "probes": []}
    run("2" * 40, [{**left, "written_at": "2026-02-01T00:00:00+00:00"}])
    run("2" * 40, [{**left, "written_at": "2025-06-01T00:00:00+00:00"}], machine="other")
    capacity = load_capacity(root).frame
    dates = capacity.groupby(["machine", "run"])["run_at"].agg(set).to_dict()
    assert dates == {
        (MACHINE, f"smoke-2048mib-{'1' * 12}"): {"2026-01-01T00:00:00+00:00"},
        (MACHINE, f"smoke-2048mib-{'2' * 12}"): {"2026-02-01T00:00:00+00:00"},
        ("other", f"smoke-2048mib-{'2' * 12}"): {"2025-06-01T00:00:00+00:00"},
    }
    assert key not in decision_table(latest(load(root).frame), capacity)
    said = unsearched(capacity, key)
    assert said == f"Left out by this preset, so no row: jittor baseline, infer ({SLOW})."
    run("2" * 40, [left])  # written before the stamp: the searched run is the later
    capacity = load_capacity(root).frame
    assert capacity[capacity["machine"] == MACHINE]["run_at"].tolist() == [
        "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00", "",
    ]  # fmt: skip
    assert decision_table(latest(load(root).frame), capacity)[key]["framework"].tolist() == [
        "jittor"
    ]
    assert (
        unsearched(capacity, key)
        == f"Left out by this preset, so no row: jittor baseline ({SLOW})."
    )


def test_speeds_read_as_plain_figures_to_three_places_never_in_exponent_form():
    from analysis.decision_text import speed_figure

    assert [speed_figure(v) for v in (1051.53, 6244.8, 12.345, 0.5, 0.0123)] == [
        "1,050", "6,240", "12.3", "0.500", "0.0123",
    ]  # fmt: skip
    assert speed_figure(float("nan")) == "-" and speed_figure(0.0) == "0"


def test_a_step_in_the_peak_is_told_with_the_allocators_reserve(tmp_path):
    """Jittor's Transformer within 2 GiB: 64 fits with 229 MiB to spare and 65 is over, its
    peak 286 MiB above 64's where a sample costs 24 and the runs spread 10: the row says so,
    with the host reserve Jittor's allocator reported at both in the search's own records
    (1,634 and 1,990 MiB); on a device budget, the device's reserve. Accumulation steps by 4:
    its jump is held against 4 samples' cost. No such note where the next batch costs what its
    samples do, where its jump lies within the runs' spread, or where the boundary was
    measured once (no spread known)."""
    from analysis.decision_evidence import reserves

    mib = 2**20

    def probes(peaks: dict[int, float], over: int) -> list[dict]:
        return [{"batch_size": b, "repeat": 1, "fits": b < over, "status": "ok",
                 "peak_bytes": p * mib} for b, p in peaks.items()]  # fmt: skip

    jumps = probes({62: 1771, 63: 1795, 64: 1819, 65: 2105}, 65)
    line = {"probes": jumps, "fit_fixed_bytes": 283 * mib, "fit_per_sample_bytes": 24 * mib}
    even = probes({b: 283 + 24 * b for b in (62, 63, 64, 65)}, 65)
    by_four = probes({60: 1723, 64: 1819, 68: 2219}, 68)  # 400 MiB up where 4 samples cost 96
    root = write_results(tmp_path / "results")
    spread = {"spread_bytes": 10 * mib, "repeats": 3}
    device = {"budget_layer": "peak_device_reserved_bytes"}
    write_capacity(root, [
        {**search("baseline", 64, 15.0, framework="jittor"), **line, **spread},
        {**search("checkpoint", 64, 15.0, framework="jittor"), **line, **spread, **device},
        {**search("accumulate-4", 64, 15.0, framework="jittor"), **line, **spread,
         "smallest_non_fit": 68, "probes": by_four},
        {**search("baseline", 64, 25.0), **line, **spread, "probes": even},
        {**search("baseline", 64, 20.0, framework="jax"), **line, "spread_bytes": 200 * mib},
        {**search("infer", 64, 20.0, framework="jittor"), **line},  # measured once
    ])  # fmt: skip
    held = []
    for strategy in ("baseline", "checkpoint"):
        for batch, reserve in ((64, 1634), (65, 1990)):
            data = record(strategy, batch, framework="jittor")
            data["metrics"]["jittor_cpu_reserved_bytes"] = reserve * mib
            data["metrics"]["jittor_cuda_reserved_bytes"] = 3 * reserve * mib
            held.append(data)
    run = paths.capacity_run(MACHINE, "smoke", 2 * GIB, "0" * 40, root)
    write_store(run / paths.PROBES, held)
    # the same commit's folder on another host, whose allocator held other figures: not ours
    elsewhere = paths.capacity_run("other", "smoke", 2 * GIB, "0" * 40, root)
    theirs = [json.loads(json.dumps(data)) for data in held]
    for data in theirs:
        data["metrics"]["jittor_cpu_reserved_bytes"] *= 2
    write_store(elsewhere / paths.PROBES, theirs)
    probes_frame = load_capacity_probes(root).frame
    assert reserves(probes_frame)["machine"].value_counts().to_dict() == {MACHINE: 8, "other": 8}
    tables = decision_table(latest(load(root).frame), load_capacity(root).frame, probes_frame)
    notes = tables[(MACHINE, "resnet50", "smoke", 2.0)].set_index(["framework", "strategy"])[NOTE]
    step = "65 peaks 286 MiB above 64, 11.9x what 1 more sample costs (24.0 MiB/sample): a jump in "
    assert notes["jittor", "baseline"] == (
        step
        + "the peak, not a sample's cost; jittor_cpu_reserved_bytes 1,634 MiB at 64, 1,990 at 65"
    )
    assert notes["jittor", "checkpoint"].endswith(
        "jittor_cuda_reserved_bytes 4,902 MiB at 64, 5,970 at 65"
    )
    # accumulate-4 fits the baseline's 64: that note first, then its step
    # its three probes, a step among them, pin no line of their own: the peaks are compared
    assert notes["jittor", "accumulate-4"] == (
        "fits no more than baseline (64): peak 1.78 GiB at 64 vs baseline 1.78 GiB at 64; "
        "68 peaks 400 MiB above 64, 4.2x what 4 more samples cost (24.0 MiB/sample): "
        "a jump in the peak, not a sample's cost"
    )
    assert notes["torch", "baseline"] == notes["jax", "baseline"] == ""
    assert notes["jittor", "infer"] == ""


def test_the_worst_error_names_its_search_the_first_of_a_tie(tmp_path):
    """Two searches miss by 20%: the row names the first in workload, framework, strategy and
    budget order, with its guess and answer."""
    root = tmp_path / "results"
    guided = {"search": "guided", "bisection_probes": 5, "model_basis": "calibrated (t)"}
    write_capacity(root, [
        search("checkpoint", 10, 5.0, model_batch=12, **guided),
        search("amp-bf16", 10, 5.0, model_batch=8, **guided),
        search("baseline", 20, 5.0, model_batch=21, **guided),
    ])  # fmt: skip
    error = capacity_error(load_capacity(root).frame, "model").set_index("framework")
    assert error.loc["torch", "worst error %"] == 20.0
    assert error.loc["torch", "worst at"] == "resnet50 torch amp-bf16 2 GiB: 8 for 10"


def test_a_search_stopped_before_it_settled_says_what_its_probes_found_and_decides_nothing(
    tmp_path,
):
    """A search whose probes are stored but whose answer is not (a GPU command's time ran
    out): a row of status unsettled that names the largest batch every run of which stayed
    within the budget and the smallest one run of which went over it (a peak on the layer its
    framework's settled searches name, or out of memory), its repeats counted, with no largest
    batch; a run with probes and no capacity file at all is read on the whole-life peak,
    within the budget its probes' records carry (never the one its folder's name says); a
    settled search of the same key wins at any date."""
    root = write_results(tmp_path / "results")
    write_capacity(root, [search("baseline", 10, 5.0), search("checkpoint", 4, 1.0, "jax")])
    run = paths.capacity_run(MACHINE, "smoke", 2 * GIB, "0" * 40, root)
    stopped = [record("baseline", b, framework="jax") for b in (6, 8, 16)]  # 16: 2.1 GiB
    stopped.append(record("baseline", 20, "oom", OOM_REASON, framework="jax"))
    write_store(run / paths.PROBES, [*stopped, record("baseline", 10)])
    write_store(run / f"{paths.PROBES}-repeat-2", [record("baseline", 8, framework="jax")])
    frame = load_capacity(root).frame.set_index(["framework", "strategy"])
    row = frame.loc[("jax", "baseline")]
    assert row["status"] == "unsettled" and math.isnan(row["largest_batch"])
    assert row["probes"] == 5 and row["budget_gib"] == 2.0 and row["repeats"] == 2
    assert row["reason"] == (
        "stopped before it settled (5 probes stored, 1 of them repeats); the largest batch "
        "within the budget: 8 (highest of 2 runs: 1,331 MiB steps' peak), the smallest with a "
        "run over it: 16 (2,150 MiB steps' peak)"
    )
    assert frame.loc[("torch", "baseline"), "status"] == "ok"  # its probes are a settled one's
    table = the_table(root).set_index(["framework", "strategy"])
    assert pd.isna(table.loc[("jax", "baseline"), LARGEST])
    assert table.loc[("jax", "baseline"), NOTE].startswith("unsettled: stopped before it settled")

    alone = paths.capacity_run(MACHINE, "smoke", 2 * GIB, "1" * 40, root)  # no capacity.json
    ran, over = record("amp-bf16", 4, framework="jax"), record("amp-bf16", 6, framework="jax")
    ran["metrics"]["life_peak_host_rss_bytes"] = 1.5 * GIB
    over["metrics"]["life_peak_host_rss_bytes"] = 2.5 * GIB  # its steady peak is within
    bare = paths.capacity_run(MACHINE, "smoke", 2 * GIB, "4" * 40, root)
    write_store(bare / paths.PROBES, [ran, over])
    frame = load_capacity(root).frame.set_index(["framework", "strategy"])
    assert ("jax", "amp-bf16") not in frame.index  # no budget carried, no answer to say it
    shutil.rmtree(bare)
    for probe in (ran, over):  # as capacity launches a probe's worker: its budget carried
        probe["environment"]["env"] = ProbeBudget(2 * GIB).env()
    write_store(alone / paths.PROBES, [ran, over])
    frame = load_capacity(root).frame.set_index(["framework", "strategy"])
    assert frame.loc[("jax", "amp-bf16"), "budget_gib"] == 2.0
    assert frame.loc[("jax", "amp-bf16"), "reason"].endswith(
        "the largest batch within the budget: 4 (1,536 MiB whole-life), the smallest with a run "
        "over it: 6 (2,560 MiB whole-life)"
    )
    # noise that straddles the budget (as a search stopped midway might find, for example
    # f25m17's JAX U-Net accumulate-4 at 2 GiB, since settled: 208 fitted all three runs, a
    # run of 200 went over): the answer lies under the smaller
    spans = paths.capacity_run(MACHINE, "smoke", 2 * GIB, "3" * 40, root)
    stores = {paths.PROBES: [(4, 1.5), (8, 1.9)], f"{paths.PROBES}-repeat-2": [(4, 2.5)]}
    for store, peaks in stores.items():  # (batch, whole-life GiB)
        probes = [record("amp-fp16", batch, framework="jax") for batch, _ in peaks]
        for probe, (_, gib) in zip(probes, peaks, strict=True):
            probe["metrics"]["life_peak_host_rss_bytes"] = gib * GIB
            probe["environment"]["env"] = ProbeBudget(2 * GIB).env()
        write_store(spans / store, probes)
    frame = load_capacity(root).frame.set_index(["framework", "strategy"])
    assert frame.loc[("jax", "amp-fp16"), "reason"].endswith(
        "the largest batch within the budget: 8 (1,946 MiB whole-life), the smallest with a "
        "run over it: 4 (1,536 MiB whole-life, 2,560 MiB whole-life); the runs' noise "
        "straddles the budget, so the answer lies below 4"
    )

    settled = paths.capacity_run(MACHINE, "smoke", 2 * GIB, "2" * 40, root)
    settled.mkdir(parents=True)
    (settled / paths.CAPACITY_FILE).write_text(json.dumps([search("baseline", 9, 3.0, "jax")]))
    table = the_table(root).set_index(["framework", "strategy"])
    assert table.loc[("jax", "baseline"), LARGEST] == 9


def test_a_device_budget_shows_no_host_steady_state_peak(tmp_path):
    """Files written before b976f02 held the host's RSS as a GPU search's steady-state peak
    (1.4 GB beside 24 GB on the H200): read, it is left out; beside a host budget it stays."""
    root = write_results(tmp_path / "results")
    device = {"budget_layer": "peak_device_allocated_bytes", "budget_enforced": True}
    write_capacity(root, [
        search("baseline", 10, 5.0, steady_peak_at_fit_bytes=1.5 * GIB),
        {**search("checkpoint", 14, 4.0, steady_peak_at_fit_bytes=1.4 * GIB), **device},
    ])  # fmt: skip
    frame = load_capacity(root).frame.set_index("strategy")
    assert frame.loc["baseline", "steady_peak_at_fit_mib"] == pytest.approx(1.5 * 1024)
    assert math.isnan(frame.loc["checkpoint", "steady_peak_at_fit_mib"])
