"""The memory model's calibration: constants fitted from calibration cells only, stored with
their provenance, used by the worker (and `membench predict`) without the cell's own
measurement; the analysis reads the predictions from the records."""

import json

import pytest

from analysis.fits import prediction_errors
from analysis.loader import latest, load
from membench import paths
from membench.backends import BuildSpec
from membench.cli import main
from membench.memory import calibration
from membench.memory.memory_model import Constants, predict
from membench.memory.predictions import prediction, refresh, stored_calibration
from membench.records import Cell, Record, write_json_atomic
from membench.registry import CALIBRATION_PRESET, preset, strategy

MIB = 2**20
MACHINE = "test-machine"
RUNTIME, FACTOR = 400 * MIB, 1.5
SIZES = preset(CALIBRATION_PRESET).size("resnet50")


def calibration_record(
    batch: int, strategy_name: str = "baseline", extra: float = 0.0, life: float | None = None
) -> Record:
    """A calibration cell whose peak the model with RUNTIME and FACTOR gives (+ extra), and
    whose whole-life peak is that + life (where given)."""
    inputs = dict(SIZES.inputs)
    peak = predict("resnet50", strategy(strategy_name), batch, inputs, Constants(RUNTIME, FACTOR))
    cell = Cell("resnet50", "torch", strategy_name, batch, CALIBRATION_PRESET)
    env = {"framework_version": "9.9", "workload_inputs": inputs, "machine": MACHINE}
    metrics = {"peak_host_rss_bytes": peak.total + extra}
    if life is not None:
        metrics["life_peak_host_rss_bytes"] = metrics["peak_host_rss_bytes"] + life
    return Record(cell, "ok", metrics=metrics, environment=env)


PROVENANCE = {
    "machine": MACHINE, "commit": "c" * 40, "dirty": False, "created_at": "2026-01-01T00:00:00",
    "records": "somewhere",
}  # fmt: skip


def test_the_fit_recovers_the_constants_behind_the_calibration_cells():
    records = [calibration_record(b, s) for b in SIZES.batch_sizes for s in ("baseline", "infer")]
    cal = calibration.calibrate(records, "cpu", PROVENANCE)
    assert [(f.workload, f.strategy, f.mode) for f in cal.fits] == [
        ("resnet50", "baseline", "train"),
        ("resnet50", "infer", "infer"),
    ]
    for name in ("baseline", "infer"):
        constants = cal.constants("resnet50", name)
        assert constants.runtime_bytes == pytest.approx(RUNTIME, rel=1e-9)
        assert constants.activation_factor == pytest.approx(FACTOR, rel=1e-9)
    assert cal.constants("unet3d", "baseline") is None  # not calibrated: no constants
    assert [p.batch_size for p in cal.fits[0].points] == list(SIZES.batch_sizes)


def test_each_strategy_has_its_own_fit_and_the_others_take_their_modes_reference():
    """A strategy whose cells cost more per sample than the spec says (here checkpointing, 40
    MiB a sample more) gets constants of its own; one the preset did not calibrate
    takes the baseline's (training) or plain inference's; a calibration stored before fits were
    per strategy (a fit of the whole mode) serves every strategy of its mode."""
    records = [calibration_record(b) for b in SIZES.batch_sizes]
    records += [calibration_record(b, "checkpoint", b * 40 * MIB) for b in SIZES.batch_sizes]
    cal = calibration.calibrate(records, "cpu", PROVENANCE)
    baseline, own = cal.constants("resnet50", "baseline"), cal.constants("resnet50", "checkpoint")
    assert baseline.activation_factor == pytest.approx(FACTOR, rel=1e-9)
    assert own.activation_factor > FACTOR  # the 40 MiB a sample the spec did not count
    knobs, inputs = strategy("checkpoint"), dict(SIZES.inputs)
    for batch in SIZES.batch_sizes:  # its own fit goes through its own cells
        measured = calibration_record(batch, "checkpoint", batch * 40 * MIB).metrics
        predicted = predict("resnet50", knobs, batch, inputs, own).total
        assert predicted == pytest.approx(measured["peak_host_rss_bytes"], rel=1e-9)
    assert cal.constants("resnet50", "amp-bf16") == baseline
    assert cal.fit("resnet50", "infer-half") is None  # no inference calibrated here
    data = cal.to_dict()  # as a calibration fitted per mode stored it: one fit a mode
    infer = calibration.calibrate(
        [calibration_record(b, "infer") for b in (2, 6)], "cpu", PROVENANCE
    )
    fits = [data["fits"][0], infer.to_dict()["fits"][0]]  # the baseline's, inference's
    data = {
        **data,
        "format": 1,
        "fits": [{k: v for k, v in f.items() if k not in ("strategy", "layer")} for f in fits],
    }
    old = calibration.Calibration.from_dict(data)
    assert old.fit("resnet50", "checkpoint").strategy == ""
    assert old.constants("resnet50", "checkpoint") == baseline
    assert old.constants("resnet50", "infer-half") == infer.constants("resnet50", "infer")
    with pytest.raises(ValueError, match="calibration format 4"):
        calibration.Calibration.from_dict({**data, "format": 4})


def test_only_calibration_cells_calibrate_and_one_batch_size_fits_nothing():
    judged = Record(Cell("resnet50", "torch", "baseline", 2, "cpu"), "ok", environment={})
    with pytest.raises(ValueError, match="only calibrate cells"):
        calibration.calibrate([calibration_record(2), judged], "cpu", PROVENANCE)
    cal = calibration.calibrate([calibration_record(2), calibration_record(2)], "cpu", PROVENANCE)
    assert cal.fits == []


def test_a_calibration_is_stored_where_paths_says_and_reads_back(tmp_path):
    records = [calibration_record(b, extra=b * MIB) for b in SIZES.batch_sizes]
    cal = calibration.calibrate(records, "cpu", PROVENANCE)
    path = calibration.save(cal, tmp_path)
    assert path == tmp_path / "calibration" / MACHINE / "torch-9.9.json"
    data = json.loads(path.read_text())
    assert data["measured_metric"] == "peak_host_rss_bytes" and data["commit"] == "c" * 40
    assert calibration.load(path) == cal
    assert calibration.find(MACHINE, "torch", "9.9", tmp_path) == cal
    assert calibration.find(MACHINE, "torch", "1.0", tmp_path) is None


def _judged(batch: int, measured: float, after_build: float) -> tuple[Cell, dict, dict]:
    cell = Cell("resnet50", "torch", "baseline", batch, "cpu")
    metrics = {
        "peak_host_rss_bytes": measured, "host_rss_after_build_bytes": after_build,
        "state_bytes_at_build": 200 * MIB,
    }  # fmt: skip
    return cell, dict(BuildSpec.of(cell).size.inputs), metrics


def _predicted(cell: Cell, inputs: dict, metrics: dict, env: dict) -> dict:
    """What the worker writes: the prediction with the stored calibration, if any."""
    return prediction(cell, inputs, metrics, env, stored_calibration(cell, env))


def test_the_worker_predicts_from_the_stored_calibration_never_from_the_cell(tmp_path, monkeypatch):
    cal = calibration.calibrate([calibration_record(b) for b in (2, 6)], "cpu", PROVENANCE)
    calibration.save(cal, tmp_path)
    monkeypatch.setattr(paths, "RESULTS", tmp_path)
    env = {"machine": MACHINE, "framework_version": "9.9", "device": "cpu"}
    cell, spec, metrics = _judged(4, 1500 * MIB, 900 * MIB)
    out = _predicted(cell, spec, metrics, env)
    inputs = preset("cpu").size("resnet50").inputs
    expected = predict(
        "resnet50", strategy("baseline"), 4, inputs, cal.constants("resnet50", "baseline")
    )
    assert out["predicted_peak_calibrated_bytes"] == pytest.approx(expected.total)
    assert out["memory_prediction_error_calibrated"] == pytest.approx(
        expected.total / (1500 * MIB) - 1
    )
    spec_only = predict("resnet50", strategy("baseline"), 4, inputs).total
    assert out["memory_prediction_error_spec_only"] == pytest.approx(spec_only / (1500 * MIB) - 1)
    assert env["calibration"]["commit"] == "c" * 40
    assert env["prediction"] == {"mode": "train"}  # what the analysis groups the errors by
    # what the cell's build allocated moves no prediction
    _, _, other = _judged(4, 1500 * MIB, 300 * MIB)
    assert _predicted(cell, spec, other, dict(env)) == out
    # another version has no calibration here; a calibration cell is never predicted by one
    assert "predicted_peak_calibrated_bytes" not in _predicted(
        cell, spec, metrics, {**env, "framework_version": "1.0"}
    )
    own = calibration_record(2)
    assert "predicted_peak_calibrated_bytes" not in _predicted(
        own.cell, dict(BuildSpec.of(own.cell).size.inputs), metrics, dict(env)
    )


def test_predict_writes_both_errors_into_old_records_and_the_analysis_reads_them(tmp_path):
    results = tmp_path / "results"
    cal = calibration.calibrate([calibration_record(b) for b in (2, 6)], "cpu", PROVENANCE)
    calibration.save(cal, results)
    inputs = preset("cpu").size("resnet50").inputs
    constants = cal.constants("resnet50", "baseline")
    store = paths.preset_store(MACHINE, "cpu", "0" * 40, results)
    truth = {1: 1.1, 2: 0.95, 4: 0.9}  # measured = calibrated prediction x this
    for batch, over in truth.items():
        calibrated = predict("resnet50", strategy("baseline"), batch, inputs, constants).total
        # an old record: no workload_inputs, its own (measured-runtime) error field
        record = Record(
            Cell("resnet50", "torch", "baseline", batch, "cpu"), "ok",
            metrics={"peak_host_rss_bytes": calibrated * over, "memory_prediction_error": 0.01},
            environment={"machine": MACHINE, "device": "cpu", "framework_version": "9.9"},
        )  # fmt: skip
        write_json_atomic(store / f"{record.cell.key}.json", record.to_dict())
    before = {p.name: json.loads(p.read_text()) for p in store.glob("*.json")}
    # the analysis judges what the records hold, and these hold no prediction yet
    assert prediction_errors(latest(load(results).frame)).empty
    writer = {"commit": "d" * 40, "dirty": False}
    assert main(["predict", "--results", str(results), "--check"]) == 1  # stale: says so
    assert len(refresh(results, writer, check=True).changed) == 3
    assert before == {p.name: json.loads(p.read_text()) for p in store.glob("*.json")}
    done = refresh(results, writer)
    assert (done.records, len(done.changed), done.skipped) == (3, 3, [])
    for path in store.glob("*.json"):
        old, new = before[path.name], json.loads(path.read_text())
        # measured values and the old fields stay; the prediction says who wrote it
        assert {k: new["metrics"][k] for k in old["metrics"]} == old["metrics"]
        assert new["environment"]["prediction"] == {"mode": "train", "written_by": writer}
        assert new["environment"]["calibration"]["commit"] == "c" * 40
    assert refresh(results, {"commit": "e" * 40}).changed == []  # nothing stale: untouched
    assert main(["predict", "--results", str(results), "--check"]) == 0
    table = prediction_errors(latest(load(results).frame))
    row = table.iloc[0]
    assert (row["framework"], row["workload"], row["mode"], row["cells"]) == (
        "torch", "resnet50", "train", 3,
    )  # fmt: skip
    errors = {b: 1 / over - 1 for b, over in truth.items()}
    # |errors| 9.1% (bs1, under-predicted), 5.3%, 11.1% (bs4, over)
    assert row["calibrated_median_abs"] == pytest.approx(abs(errors[1]))
    assert row["calibrated_worst"] == pytest.approx(errors[4])
    assert row["calibrated_worst_cell"] == "baseline bs4"
    assert row["calibrated_under"] == pytest.approx(1 / 3)
    assert row["spec_only_under"] == 1.0  # no runtime part: every cell under-predicted
    # without the calibration the calibrated terms go, and so does the table's column
    paths.calibration_file(MACHINE, "torch", "9.9", results).unlink()
    assert len(refresh(results, writer).changed) == 3
    without = prediction_errors(latest(load(results).frame))
    assert without.iloc[0]["calibrated_median_abs"] != without.iloc[0]["calibrated_median_abs"]
    assert "calibration" not in json.loads(next(store.glob("*.json")).read_text())["environment"]


def test_predict_refuses_a_calibration_it_cannot_read_before_touching_a_record(tmp_path, capsys):
    results = tmp_path / "results"
    bad = paths.calibration_file(MACHINE, "torch", "9.9", results)
    bad.parent.mkdir(parents=True)
    bad.write_text('{"machine": "m"}')
    assert main(["predict", "--results", str(results)]) == 2
    assert "calibration cannot be read" in capsys.readouterr().err


def test_predict_writes_the_models_guess_now_into_stored_searches(tmp_path):
    """A capacity search keeps the first guess that guided it and gains the model's guess
    with the calibrations stored now (`membench predict`), for the inputs and framework version
    its probes ran, in the order a run writes the fields; a search of a workload this checkout
    does not know is left as it is; a second pass changes nothing."""
    from dataclasses import asdict

    from membench.capacity.first_guess import Ran, model_guess
    from membench.capacity.model_guesses import rescore
    from membench.capacity.search_steps import MAX_BATCH, budget_for
    from membench.records import CapacityResult, RecordStore, save_capacity_items

    results = tmp_path / "results"
    records = [calibration_record(b, s) for b in SIZES.batch_sizes for s in ("baseline", "infer")]
    calibration.save(calibration.calibrate(records, "cpu", PROVENANCE), results)
    budget = budget_for("cpu", 2 * 2**30)
    found = CapacityResult(
        "resnet50", "torch", "baseline", "cpu", budget.bytes, budget.layer, False, "", 8, 9,
        "ok", "", [{"batch_size": 12}], predicted_batch=20, prediction_basis="spec-only",
    )  # fmt: skip
    # as a search written before the model's guess was kept: no model_* fields (nor the
    # later written_at, which predict does not add: it says when a run wrote the result)
    later = ("model_batch", "model_basis", "written_at")
    old = {k: v for k, v in asdict(found).items() if k not in later}
    searches = [old, {**old, "workload": "gone"}]
    path = paths.capacity_run(MACHINE, "cpu", budget.bytes, "0" * 40, results)
    save_capacity_items(searches, path / paths.CAPACITY_FILE)
    # its first probe ran at 96x96 with torch 9.9: the guess is made for what it ran
    ran = {"workload_inputs": {"image_size": 96, "num_classes": 1000}, "framework_version": "9.9"}
    probe = Record(Cell("resnet50", "torch", "baseline", 12, "cpu"), "ok", environment=ran)
    RecordStore(path / paths.PROBES).put(probe)
    stored = calibration.load_all(results)
    assert main(["predict", "--results", str(results), "--check"]) == 1  # stale: says so
    done = rescore(results, stored)
    assert (done.searches, len(done.changed), done.skipped) == (1, 1, [])
    new = json.loads((path / paths.CAPACITY_FILE).read_text())
    # the fields in the order a run writes them
    assert list(new[0]) == [k for k in asdict(found) if k != "written_at"]
    what = Ran(dict(ran["workload_inputs"]), "9.9")
    args = ("resnet50", "torch", "baseline", "cpu", budget, MACHINE, MAX_BATCH)
    calibrated = model_guess(*args, stored, what)
    assert calibrated.batch != model_guess(*args, stored).batch  # 96x96, not the preset's 224
    assert calibrated.batch != model_guess(*args, {}, what).batch  # the calibration moved it
    assert (new[0]["model_batch"], new[0]["model_basis"]) == (
        calibrated.batch,
        "calibrated (torch 9.9)",
    )
    assert new[0]["predicted_batch"] == 20 and new[1] == searches[1]
    assert rescore(results, stored).changed == []


def test_accumulation_and_inference_calibrate_at_their_own_batches_and_older_fits_go_unused():
    """accumulate-4 at 4x the baseline's batches (its micro-batches as large as the baseline's
    batches) and inference at batches where its smaller per-sample cost shows; a fit of theirs
    measured at the workload's batches (the protocol before) guides no search."""
    from membench.capacity.first_guess import current_protocol
    from membench.commands.calibrate import calibration_cells

    cells = calibration_cells(["resnet50"], ["torch"])
    at = {s: sorted(c.batch_size for c in cells if c.strategy == s) for s in ("baseline",
          "accumulate-4", "infer")}  # fmt: skip
    assert at == {"baseline": [6, 18], "accumulate-4": [28, 76], "infer": [40, 120]}
    before = [calibration_record(b, s) for b in SIZES.batch_sizes for s in ("baseline", "infer")]
    old = calibration.calibrate(before, "cpu", PROVENANCE)
    assert current_protocol(old, "resnet50", "baseline")
    assert not current_protocol(old, "resnet50", "infer")
    now = calibration.calibrate(
        [*before[::2], *(calibration_record(b, "infer") for b in at["infer"])], "cpu", PROVENANCE
    )
    assert current_protocol(now, "resnet50", "infer")
    assert current_protocol(now, "resnet50", "infer-half")  # plain inference's fit stands in


def test_the_host_allocator_strategies_calibrate_with_inference_at_its_own_batches():
    """Every strategy a capacity search guesses has a fit of its own: mmap-threshold at the
    workload's batches, infer-mmap-threshold at plain inference's."""
    from membench.commands.calibrate import calibration_cells
    from membench.registry.presets import CAPACITY_STRATEGIES

    cells = calibration_cells(["transformer"], ["torch"])
    assert {c.strategy for c in cells} == set(CAPACITY_STRATEGIES)
    at = {s: sorted(c.batch_size for c in cells if c.strategy == s) for s in ("baseline",
          "mmap-threshold", "infer", "infer-mmap-threshold")}  # fmt: skip
    assert at == {
        "baseline": [8, 34], "mmap-threshold": [8, 34], "infer": [32, 128],
        "infer-mmap-threshold": [32, 128],
    }  # fmt: skip


def test_calibration_warms_a_disk_compile_cache_as_a_search_does(tmp_path, monkeypatch):
    """Jittor's cells meet its compile cache warm, as a capacity search's probes do: cells at
    each strategy's step and twice it run first, into a store of their own; torch's (no cache
    on disk) run alone."""
    from membench.cells import progress
    from membench.cells.compile_cache import warm_up_cells
    from membench.commands.calibrate import calibration_cells, run_calibration

    cells = calibration_cells(["transformer"], ["jittor", "torch"])
    warm = warm_up_cells(cells)
    assert {c.framework for c in warm} == {"jittor"}
    by = {s: sorted(c.batch_size for c in warm if c.strategy == s) for s in ("baseline",
          "accumulate-4")}  # fmt: skip
    assert by == {"baseline": [1, 2], "accumulate-4": [4, 8]}
    assert {c.preset for c in warm} == {CALIBRATION_PRESET}
    assert warm_up_cells([c for c in cells if c.framework == "torch"]) == []

    runs = []

    def run(cells, store, control):
        runs.append((store.root.name, [c.key for c in cells]))
        return progress.supervision.RunResult([], 0, 0)

    monkeypatch.setattr(progress, "run_with_progress", run)
    assert run_calibration(["transformer"], ["jittor", "torch"], tmp_path) == []
    (warm_store, warm_keys), (store, keys) = runs
    assert warm_store == f"{store}-warm-up" and store.startswith("records-")
    assert warm_keys == [c.key for c in warm] and keys == [c.key for c in cells]


def test_a_fit_measured_at_other_inputs_guides_no_search():
    """ResNet-50's fits at 128x128 (the calibrate preset's size before) did not carry to the
    searches' 224x224: a fit measured at inputs other than the preset's is not current."""
    from dataclasses import replace

    from membench.capacity.first_guess import current_protocol

    records = [calibration_record(b) for b in SIZES.batch_sizes]
    here = calibration.calibrate(records, "cpu", PROVENANCE)
    assert current_protocol(here, "resnet50", "baseline")
    smaller = {**SIZES.inputs, "image_size": 128}
    moved = [replace(r, environment={**r.environment, "workload_inputs": smaller}) for r in records]
    cal = calibration.calibrate(moved, "cpu", PROVENANCE)
    assert [p.inputs["image_size"] for p in cal.fits[0].points] == [128, 128]
    assert not current_protocol(cal, "resnet50", "baseline")


def test_no_committed_search_answered_at_a_calibration_batch_of_its_inputs():
    """The calibration cells feed no judged answer: no committed capacity search of the
    calibrate preset's inputs on a host kind with a calibration of its own answered, or put
    its next batch, at its strategy's calibration batches (the answers at 224x224 were read
    before ResNet-50's batches were chosen)."""
    from membench.registry import CALIBRATION_STRATEGIES, PRESETS, calibration_batches

    cal_sizes = preset(CALIBRATION_PRESET).sizes
    calibrated = {machine for machine, _, _ in calibration.load_all(paths.RESULTS)}
    checked = 0
    for path in paths.capacity_files(paths.RESULTS):
        if path.parent.parent.name not in calibrated:  # capacity/<machine>/<run>/capacity.json
            continue
        for item in json.loads(path.read_text()):
            workload, name = item["workload"], item["strategy"]
            known = PRESETS.get(item["preset"])
            size = known.sizes.get(workload) if known else None
            if name not in CALIBRATION_STRATEGIES or workload not in cal_sizes or size is None:
                continue
            if dict(size.inputs) != dict(cal_sizes[workload].inputs):
                continue
            said = {item.get("largest_batch"), item.get("smallest_non_fit")}
            assert not said & set(calibration_batches(workload, name)), (path, workload, name)
            checked += 1
    assert checked > 50  # the cpu-capacity searches of all three workloads


def test_a_host_calibration_fits_the_whole_life_peak_too_and_the_capacity_guess_uses_it(tmp_path):
    """Calibration cells whose whole life (the first step's compiles, forked compilers) peaks
    300 MiB above their measured steps: the records' predictions keep the steps' constants,
    the capacity guess for a whole-life budget the whole life's, and a calibration without
    whole-life fits (stored before) still guides it with the steps'."""
    from membench.capacity.first_guess import model_guess
    from membench.capacity.search_steps import MAX_BATCH, budget_for
    from membench.metrics import LIFE_METRIC

    records = [calibration_record(b, life=300 * MIB) for b in SIZES.batch_sizes]
    cal = calibration.calibrate(records, "cpu", PROVENANCE)
    steady = cal.constants("resnet50", "baseline")
    life = cal.constants("resnet50", "baseline", LIFE_METRIC)
    assert steady.runtime_bytes == pytest.approx(RUNTIME, rel=1e-9)
    assert life.runtime_bytes == pytest.approx(RUNTIME + 300 * MIB, rel=1e-9)
    assert life.activation_factor == pytest.approx(FACTOR, rel=1e-9)
    assert cal.constants("resnet50", "checkpoint", LIFE_METRIC) == life  # the mode's reference
    saved = calibration.load(calibration.save(cal, tmp_path))
    assert saved.fits == cal.fits  # the layer reads back

    knobs, inputs = strategy("baseline"), dict(SIZES.inputs)
    at_20 = predict("resnet50", knobs, 20, inputs, life).total
    budget = budget_for("cpu", at_20 + MIB)
    assert budget.layer == LIFE_METRIC
    args = ("resnet50", "torch", "baseline", "cpu-capacity", budget, MACHINE, MAX_BATCH)
    guessed = model_guess(*args, {(MACHINE, "torch", "9.9"): cal})
    assert guessed.batch == 20
    # the batches its constants were measured at: a search answering there is not scored
    assert guessed.measured_batches == tuple(sorted(SIZES.batch_sizes))
    # a fit standing in measured other cells: the reference strategy's, another host kind's
    lent = ("resnet50", "torch", "checkpoint", "cpu-capacity", budget, MACHINE, MAX_BATCH)
    assert "baseline's constants" in model_guess(*lent, {(MACHINE, "torch", "9.9"): cal}).basis
    assert model_guess(*lent, {(MACHINE, "torch", "9.9"): cal}).measured_batches == ()
    elsewhere = ("resnet50", "torch", "baseline", "cpu-capacity", budget, "other-host", MAX_BATCH)
    assert model_guess(*elsewhere, {(MACHINE, "torch", "9.9"): cal}).measured_batches == ()
    before = calibration.calibrate([calibration_record(b) for b in SIZES.batch_sizes], "cpu",
                                   PROVENANCE)  # fmt: skip
    assert before.constants("resnet50", "baseline", LIFE_METRIC) is None
    by_steps = model_guess(*args, {(MACHINE, "torch", "9.9"): before}).batch
    assert by_steps > 20  # 300 MiB more room: the steps' constants, as before
