"""Capacity search: bisection finds a known boundary, in fresh processes for real cells."""

import json
import re
from dataclasses import asdict, replace
from types import SimpleNamespace

import pytest

from membench import cli
from membench.capacity.search import (
    answer_speed,
    boundary,
    capacity,
    confirmed,
    distinct,
    probe_line,
)
from membench.capacity.search_steps import Budget, Probe, Search, bisect, budget_for, fits, guided
from membench.records import (
    PROBE_BUDGET_ENV,
    CapacityResult,
    ProbeBudget,
    load_capacity_results,
    save_capacity_results,
)

MIB = 2**20


def curve(fixed_mib: float, per_sample_mib: float, budget_mib: float, seen: list[int]):
    """A probe over a known memory curve: fixed + per-sample x batch against a budget."""

    def probe(batch: int) -> Probe:
        seen.append(batch)
        peak = (fixed_mib + per_sample_mib * batch) * MIB
        return Probe(batch, "ok", peak, peak <= budget_mib * MIB)

    return probe


@pytest.mark.parametrize("budget_mib, expected", [(1000, 30), (1001, 30), (1031, 31), (600, 16)])
def test_bisection_finds_the_exact_boundary_of_a_known_curve(budget_mib, expected):
    seen: list[int] = []
    search = bisect(curve(100, 30, budget_mib, seen))
    assert search.largest_fit == expected
    assert search.smallest_non_fit == expected + 1
    assert seen[:5] == [1, 2, 4, 8, 16]  # doubling first
    assert len(seen) <= 2 * len(bin(expected))  # then logarithmic


def test_accumulation_searches_multiples_of_its_micro_batch_count():
    search = bisect(curve(0, 10, 275, []), step=4)
    assert search.largest_fit == 24 and search.smallest_non_fit == 28


def test_a_tolerance_stops_early_with_both_bounds_kept():
    seen: list[int] = []
    search = bisect(curve(0, 1, 1000, seen), tolerance=0.125)
    assert search.largest_fit <= 1000 < search.smallest_non_fit
    assert search.smallest_non_fit - search.largest_fit <= 0.125 * search.largest_fit
    assert len(seen) < len(bisect(curve(0, 1, 1000, [])).probes)


@pytest.mark.parametrize("first, expected_first_probes", [(16, [16, 32]), (64, [64, 32, 16])])
def test_a_first_guess_starts_the_doubling_and_still_finds_the_boundary(
    first, expected_first_probes
):
    seen: list[int] = []
    search = bisect(curve(100, 30, 1000, seen), first=first)  # boundary at 30
    assert search.largest_fit == 30 and search.smallest_non_fit == 31
    assert seen[: len(expected_first_probes)] == expected_first_probes
    assert len(seen) < len(bisect(curve(100, 30, 1000, [])).probes)


def test_nothing_fits_and_everything_fits():
    assert bisect(curve(2000, 1, 1000, [])).largest_fit == 0
    search = bisect(curve(0, 1, 10**9, []), max_batch=64)
    assert search.largest_fit == 64 and search.smallest_non_fit is None


def test_an_out_of_memory_probe_does_not_fit():
    search = bisect(lambda b: Probe(b, "ok" if b <= 5 else "oom", None, b <= 5))
    assert search.largest_fit == 5


def test_cpu_budgets_apply_to_the_whole_life_peak_and_say_so():
    budget = budget_for("cpu", 2 * 2**30)
    assert budget.layer == "life_peak_host_rss_bytes" and not budget.enforced
    assert "no memory limit was imposed" in budget.note
    assert budget_for("cuda", 2**30).enforced


@pytest.mark.slow
def test_capacity_in_fresh_processes_finds_the_boundary_of_a_real_allocation(
    fake_framework, store, monkeypatch
):
    """The fake step touches 16 MiB per sample: with the budget set 8 MiB above the
    measured peak at batch 6, the largest batch that fits is 6."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "per-sample")
    monkeypatch.setenv("FAKE_MIB_PER_SAMPLE", "16")
    from membench.cells.supervision import run
    from membench.records import Cell

    at_six = run([Cell("fake-work", "fake", "baseline", 6, "smoke")], store).records[0]
    peak = at_six.metrics["peak_host_rss_bytes"]
    budget = Budget(peak + 8 * MIB, "peak_host_rss_bytes", enforced=False)
    said: list[str] = []
    result = capacity("fake-work", "fake", "baseline", "smoke", budget, store, progress=said.append)
    assert (result.largest_fit, result.smallest_non_fit) == (6, 7)
    assert [p["batch_size"] for p in result.probes][:4] == [1, 2, 4, 8]
    # each probe is told as it ends, its peak against the budget
    assert [line.split(":")[0] for line in said] == [
        f"batch {p['batch_size']}" for p in result.probes
    ]
    told = dict(line.split(": ", 1) for line in said)
    assert re.fullmatch(r"[\d,]+ MiB, fits, [\d,]+ MiB to spare", told["batch 1"])
    assert re.fullmatch(r"[\d,]+ MiB, over by \d+ MiB", told["batch 7"])
    assert told["batch 6"].endswith(" (stored)")  # the cell measured above, reused
    # the fit over the probes recovers the step's 16 MiB per sample
    assert result.fit_per_sample_bytes == pytest.approx(16 * MIB, rel=0.05)
    assert result.fit_r2 > 0.99


def test_a_probe_line_names_the_run_and_the_reason_a_probe_has_no_peak():
    budget = 108 * MIB
    assert probe_line(Probe(6, "ok", 100 * MIB, True, repeat=2), budget) == (
        "batch 6, run 2: 100 MiB, fits, 8 MiB to spare"
    )
    assert probe_line(Probe(8, "oom", None, False, "out of memory at step 1"), budget) == (
        "batch 8: oom (out of memory at step 1)"
    )


def test_unsupported_strategies_end_the_search_with_their_reason(fake_framework, store):
    budget = Budget(2**40, "peak_host_rss_bytes", enforced=False)
    result = capacity("fake-work", "fake", "infer-half", "smoke", budget, store)
    assert result.status == "unsupported" and "half precision" in result.reason
    assert result.largest_fit == 0
    # the probe's record carries the budget it was searched within
    (refused,) = store.records()
    assert ProbeBudget.of_record(refused) == ProbeBudget(2**40)


def test_a_probe_s_budget_is_one_value_from_capacity_to_the_worker():
    """Bytes and the device's total, serialised once (env) and read back once (of_env): the
    worker's framework takes the share, unrounded; a host budget imposes none."""
    gpu = ProbeBudget(24 * 2**30, 150_754_820_096)
    assert ProbeBudget.of_env(gpu.env()) == gpu
    assert gpu.device_fraction == 24 * 2**30 / 150_754_820_096
    assert ProbeBudget(2 * 2**40, 2**40).device_fraction == 1.0  # all of the device at most
    assert ProbeBudget(2**30).device_fraction is None and ProbeBudget.of_env({}) is None
    with pytest.raises(ValueError, match="MEMBENCH_PROBE_BUDGET='0.5' is not a probe budget"):
        ProbeBudget.of_env({PROBE_BUDGET_ENV: "0.5"})
    with pytest.raises(ValueError, match="must be positive"):
        ProbeBudget(0, 2**30)


def test_cli_needs_a_budget_on_cpu_and_refuses_bad_sizes(capsys):
    assert cli.main(["capacity", "-p", "smoke"]) == 2
    assert "--budget" in capsys.readouterr().err
    assert cli.main(["capacity", "--budget", "lots"]) == 2
    assert "not a size: 'lots'" in capsys.readouterr().err


def test_results_file_round_trips_and_a_corrupt_one_is_named(tmp_path):

    result = CapacityResult("w", "f", "s", "p", 1.0, "l", False, "n", 3, 4, "ok", "", [], 2.0)
    path = tmp_path / "capacity.json"
    save_capacity_results([result], path)
    assert load_capacity_results(path) == [result]
    path.write_text(json.dumps({"not": "a list"})[:-3])
    with pytest.raises(ValueError, match="capacity.json: not a capacity results file"):
        load_capacity_results(path)


def test_linear_fit_recovers_known_coefficients():
    from membench.fitting import linear_fit

    batches = [1, 2, 4, 8, 16]
    fixed, per_sample, r2 = linear_fit(batches, [300 + 25 * b for b in batches])
    assert (fixed, per_sample, r2) == (pytest.approx(300), pytest.approx(25), pytest.approx(1))
    noisy = [300 + 25 * b + (-1) ** b for b in batches]
    assert linear_fit(batches, noisy)[1] == pytest.approx(25, rel=0.02)


def test_frameworks_that_swap_to_the_host_are_never_reported_as_a_fit(store):
    budget = Budget(80 * 2**30, "peak_device_allocated_bytes", enforced=True)
    result = capacity("resnet50", "jittor", "managed-allocator", "gpu", budget, store)
    assert result.status == "swaps" and result.largest_fit == 0 and not result.probes
    assert "instead of failing" in result.reason
    # every result keeps the model's guess, this early one too (membench predict writes it
    # again into each: one missing would read as stale)
    assert result.model_batch is not None and result.model_basis


@pytest.mark.slow
def test_cli_searches_and_writes_results(fake_framework, monkeypatch, tmp_path):
    """membench capacity end to end on the fake framework, asv recording stubbed out."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "per-sample")
    monkeypatch.setenv("FAKE_MIB_PER_SAMPLE", "16")
    monkeypatch.setattr("membench.paths.RESULTS", tmp_path / "results")
    monkeypatch.setattr("membench.environment.git_commit", lambda: {"commit": "c0", "dirty": False})
    monkeypatch.setattr("membench.publish.asv_run.run_asv", lambda env, regexes: 0)
    args = ["capacity", "-w", "fake-work", "-f", "fake", "-s", "baseline", "-p", "smoke"]
    assert cli.main([*args, "--budget", "4GiB", "--max-batch", "8"]) == 0
    (path,) = tmp_path.glob("results/capacity/*/smoke-4096mib-*/capacity.json")
    (result,) = load_capacity_results(path)
    assert result.largest_fit == 8 and result.smallest_non_fit is None


@pytest.mark.parametrize(
    "slope_error, predicted_off",
    [(1.0, 0), (1.0, 3), (1.0, -5), (1.3, 0), (0.7, 0), (1.0, 40), (1.0, -25), (4.0, 10)],
)
def test_the_guided_search_finds_the_exact_boundary_from_any_prediction(slope_error, predicted_off):
    """Boundary at 30 (100 + 30 x batch MiB within 1000 MiB): the search ends on it whether
    the model's first batch and its bytes per sample are right or off."""
    from membench.capacity.search_steps import guided

    seen: list[int] = []
    start = 30 + predicted_off
    search = guided(curve(100, 30, 1000, seen), 1000 * MIB, start, 30 * MIB * slope_error)
    assert (search.largest_fit, search.smallest_non_fit) == (30, 31)
    assert seen[0] == start
    assert len(seen) == len(set(seen))  # never the same batch twice
    assert len(seen) < len(bisect(curve(100, 30, 1000, [])).probes)


def test_a_right_model_needs_two_probes_a_fit_and_the_next_non_fit():
    from membench.capacity.search_steps import guided

    seen: list[int] = []
    guided(curve(100, 30, 1000, seen), 1000 * MIB, 30, 30 * MIB)
    assert seen == [30, 31]


def test_guided_accumulation_and_the_search_maximum():
    from membench.capacity.search_steps import guided

    search = guided(curve(0, 10, 275, []), 275 * MIB, 12, 10 * MIB, step=4)
    assert (search.largest_fit, search.smallest_non_fit) == (24, 28)
    search = guided(curve(0, 1, 10**9, []), 10**9 * MIB, 500, MIB, max_batch=64)
    assert (search.largest_fit, search.smallest_non_fit) == (64, None)
    assert guided(curve(2000, 1, 1000, []), 1000 * MIB, 3, MIB).largest_fit == 0


def test_guided_out_of_memory_probes_carry_no_peak_and_still_converge():
    """A real out-of-memory (GPU) has no measured peak: the search bisects down from it."""
    from membench.capacity.search_steps import guided

    seen: list[int] = []
    search = guided(
        lambda b: seen.append(b) or Probe(b, "ok" if b <= 21 else "oom", None, b <= 21), 0, 40, MIB
    )
    assert (search.largest_fit, search.smallest_non_fit) == (21, 22)
    assert len(seen) <= 8


@pytest.mark.parametrize("answer, maximum", [(30, 65536), (1, 65536), (64, 64), (24, 65536)])
def test_bisection_probes_count_what_plain_bisection_takes(answer, maximum):
    from membench.capacity.search_steps import bisection_probes

    limit = answer if answer < maximum else 10**9
    expected = len(bisect(curve(0, 1, limit, []), max_batch=maximum).probes)
    non_fit = answer + 1 if answer < maximum else None
    assert bisection_probes(answer, non_fit, max_batch=maximum) == expected


def test_the_models_guess_is_the_largest_batch_its_prediction_keeps_in_the_budget(
    monkeypatch, fake_framework
):
    """Spec-only (no calibration): the guess's predicted peak fits and one step more does not."""
    from membench import registry
    from membench.capacity.first_guess import model_guess
    from membench.memory import memory_model

    monkeypatch.setattr("membench.memory.calibration.load_all", lambda results=None: {})
    budget = budget_for("cpu", 3 * 2**30)
    guess = model_guess("resnet50", "torch", "accumulate-4", "cpu", budget, "m")
    assert guess.basis == "spec-only" and guess.batch % 4 == 0 and guess.batch > 0
    inputs = registry.preset("cpu").size("resnet50").inputs
    knobs = registry.strategy("accumulate-4")

    def peak(b):
        return memory_model.predict("resnet50", knobs, b, inputs).total

    assert peak(guess.batch) <= budget.bytes < peak(guess.batch + 4)
    assert model_guess("fake-work", "torch", "baseline", "smoke", budget, "m") is None


def test_a_host_kind_without_a_calibration_guesses_from_another_ones(monkeypatch, fake_framework):
    """This machine's calibration of the workload's strategy first; where it has none (here: no
    U-Net), another host kind's, and the basis names whose; never a fit measured at other
    batches than the calibrate preset's (an older protocol), nor a GPU's for another GPU;
    none at all: the spec alone."""
    from membench import registry
    from membench.capacity.first_guess import model_guess
    from membench.memory.calibration import Calibration, Fit, Point

    def fit(workload, batches=None):
        size = registry.preset("calibrate").size(workload)
        inputs = dict(size.inputs)
        points = tuple(Point("k", "baseline", b, inputs, 0.0) for b in batches or size.batch_sizes)
        return Fit(workload, "train", 300 * MIB, 1.5, 1.0, points)

    def cal(machine, fits, created_at, kind="cpu"):
        return Calibration(machine, "torch", "2", kind, "c", False, created_at, "", fits)

    stored = {
        ("here", "torch", "2"): cal("here", [fit("resnet50")], "2026-01-01"),
        ("there", "torch", "2"): cal("there", [fit("resnet50"), fit("unet3d")], "2026-02-01"),
        ("old", "torch", "2"): cal("old", [fit("transformer", (3, 5))], "2026-03-01"),
        ("gpu", "torch", "2"): cal("gpu", [fit("resnet50")], "2026-03-01", "gpu"),
    }
    monkeypatch.setattr("membench.memory.calibration.load_all", lambda results=None: stored)

    def basis(workload, machine="here", device="cpu"):
        budget = budget_for(device, 2 * 2**30)
        return model_guess(workload, "torch", "baseline", "cpu", budget, machine).basis

    assert basis("resnet50") == "calibrated (torch 2)"
    # a strategy without a fit of its own takes its mode's, and the basis says whose
    budget = budget_for("cpu", 2 * 2**30)
    amp = model_guess("resnet50", "torch", "amp-bf16", "cpu", budget, "here")
    assert amp.basis == "calibrated (torch 2, baseline's constants)"
    assert basis("unet3d") == "calibrated on there (torch 2)"
    assert basis("resnet50", "elsewhere") == "calibrated on there (torch 2)"  # the newer
    assert basis("transformer") == "spec-only"  # old's fit: other batches
    assert basis("resnet50", "gpu", "cuda") == "calibrated (torch 2)"  # its own GPU
    assert basis("resnet50", "another-gpu", "cuda") == "spec-only"


def test_once_two_peaks_span_two_steps_the_search_steps_by_their_slope():
    """The model's slope is half the truth: after 41 (too far) the move down is held to
    bisection's (20); then the two peaks' measured slope (30 MiB a sample) lands on the
    boundary at once."""
    from membench.capacity.search_steps import guided

    seen: list[int] = []
    search = guided(curve(100, 30, 1000, seen), 1000 * MIB, 41, 15 * MIB)
    assert seen == [41, 20, 30, 31] and search.largest_fit == 30


def test_one_peak_and_the_models_fixed_part_give_the_slope_of_a_strategy_it_misjudges():
    """The model's fixed part (100 MiB) is right, its slope a third of the truth: the line from
    that fixed part through the first measured peak finds the boundary with the next probe."""
    from membench.capacity.search_steps import guided

    seen: list[int] = []
    search = guided(curve(100, 30, 1000, seen), 1000 * MIB, 60, 10 * MIB, fixed_bytes=100 * MIB)
    assert seen == [60, 30, 31] and search.largest_fit == 30


def test_a_refused_strategy_ends_the_guided_search_at_its_first_probe():
    from membench.capacity.search_steps import guided

    seen: list[int] = []
    search = guided(lambda b: seen.append(b) or Probe(b, "unsupported", None, False), 0, 112, MIB)
    assert seen == [112] and search.largest_fit == 0


def test_a_search_creeping_up_a_curved_peak_doubles_its_step_and_brackets_the_boundary():
    """A concave peak (100 + 66 sqrt(batch) MiB, 800 MiB: boundary at 112) makes each measured
    slope too steep, so the moves up shrink; after three the step doubles (111 -> 113) and the
    bracket closes at once, where doubling from the last fit cost 8 probes."""
    import math

    from membench.capacity.search_steps import guided

    seen: list[int] = []

    def probe(batch: int) -> Probe:
        seen.append(batch)
        peak = (100 + 66 * math.sqrt(batch)) * MIB
        return Probe(batch, "ok", peak, peak <= 800 * MIB)

    search = guided(probe, 800 * MIB, 68, 4 * MIB, max_batch=128)
    assert (search.largest_fit, search.smallest_non_fit) == (112, 113)
    assert seen == [68, 106, 111, 113, 112]


def test_a_calibrated_factor_that_is_not_positive_gives_way_to_the_specs_activations(
    monkeypatch, fake_framework
):
    """The U-Net's inference calibrated on CPU at batches 1 and 3 fitted a negative factor: the
    model then said 0 ("not one step fits") and the search doubled from batch 1 (12 probes).
    The calibrated runtime stays; the activations are the spec's, and the basis says so."""
    from membench import registry
    from membench.capacity.first_guess import model_guess
    from membench.memory import memory_model
    from membench.memory.memory_model import Constants

    class Negative:
        machine, framework, framework_version = "m", "torch", "9"

        def fit(self, workload, strategy, layer=None):
            negative = Constants(runtime_bytes=300 * 2**20, activation_factor=-0.5)
            return SimpleNamespace(constants=negative, points=(), strategy=strategy, mode="infer")

    monkeypatch.setattr("membench.capacity.first_guess.calibration_for", lambda *a: Negative())
    budget = budget_for("cpu", 900 * 2**20)
    guess = model_guess("unet3d", "torch", "infer", "cpu-quick", budget, "m", 64)
    assert guess.basis == "calibrated (torch 9), spec activations (calibrated factor not positive)"
    inputs = registry.preset("cpu-quick").size("unet3d").inputs
    spec = Constants(300 * 2**20, 1.0)

    def peak(b):
        return memory_model.predict("unet3d", registry.strategy("infer"), b, inputs, spec).total

    assert guess.bytes_per_sample == pytest.approx(peak(2) - peak(1))
    assert 0 < guess.batch <= 64 and peak(guess.batch) <= budget.bytes


@pytest.mark.slow
def test_a_probe_whose_first_step_exceeds_the_budget_is_not_a_fit(
    fake_framework, store, monkeypatch
):
    """The fake step touches 4 MiB per sample, and 300 MiB more in its first step (as a
    compile would): a budget above the measured steps' peak but below the first step's is
    no fit, though the measured steps alone would have fitted."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "per-sample")
    monkeypatch.setenv("FAKE_MIB_PER_SAMPLE", "4")
    monkeypatch.setenv("FAKE_FIRST_STEP_MIB", "300")
    from membench.cells.supervision import run
    from membench.records import Cell

    record = run([Cell("fake-work", "fake", "baseline", 2, "smoke")], store).records[0]
    steady, life = record.metrics["peak_host_rss_bytes"], record.metrics["life_peak_host_rss_bytes"]
    assert life - steady > 250 * MIB  # the first step's 300 MiB, counted over the whole life
    assert record.metrics["life_peak_own_rss_bytes"] == life  # no other process here
    assert record.metrics["life_peak_others_rss_bytes"] == 0
    between = steady + 100 * MIB
    assert fits(record, Budget(between, "peak_host_rss_bytes", enforced=False)).fits
    probe = fits(record, budget_for("cpu", between))
    assert not probe.fits and probe.peak_bytes == life and probe.steady_peak_bytes == steady


def test_the_whole_life_peak_keeps_what_a_reset_erased():
    """A reset scopes VmHWM to the next phase; life_peak() keeps the mark it erased."""
    from membench.instruments.probes import HostPeakProbe

    host = HostPeakProbe()
    host.reset()
    block = bytearray(300 * MIB)
    for i in range(0, len(block), 4096):
        block[i] = 1
    del block
    host.reset()  # the 300 MiB are freed and trimmed: the phase's mark starts below them
    assert host.life_peak() - host.read().peak_bytes > 250 * MIB


def noisy(peaks: dict[int, list[float]], budget: float):
    """A probe answering each batch's next measured peak from peaks (its repeats in order)."""
    calls: list[tuple[int, int]] = []

    def probe(batch: int, repeat: int = 1) -> Probe:
        calls.append((batch, repeat))
        peak = peaks[batch][repeat - 1]
        return Probe(batch, "ok", peak, peak <= budget, repeat=repeat)

    return probe, calls


def test_a_boundary_whose_repeats_straddle_the_budget_is_not_a_fit():
    """Batch 10 fits once and is over the budget on its second measurement: the answer is 9,
    measured three times within the budget; 10 is the next batch, measured three times."""
    peaks = {b: [900.0 + 10 * b] * 3 for b in range(1, 10)}
    peaks[10] = [995.0, 1004.0, 998.0]
    peaks[11] = [1010.0, 1012.0, 1009.0]
    probe, calls = noisy(peaks, 1000)

    def below(top: int) -> Search:
        return guided(probe, 1000, top, 10, max_batch=top)

    search = guided(probe, 1000, 10, 10, max_batch=64)
    assert (search.largest_fit, search.smallest_non_fit) == (10, 11)
    search = confirmed(search, probe, 3, 1, below, 1000)
    assert (search.largest_fit, search.smallest_non_fit) == (9, 10)
    assert [c for c in calls if c[0] == 9] == [(9, 1), (9, 2), (9, 3)]
    assert sorted(c for c in calls if c[0] == 10) == [(10, 1), (10, 2), (10, 3)]
    found = boundary(distinct(search.probes), 1000, 9, 10)
    assert found["margin_bytes"] == 10 and found["spread_bytes"] == 9
    assert found["over_bytes"] == pytest.approx(-1.0)  # 10's mean is under: within noise


def test_an_answer_with_less_room_than_its_noise_is_not_a_fit():
    """Every repeat of 10 fits, but 2 MiB to spare against a spread of 12 (11's repeats):
    10 is within its noise, so no fit; 9 leaves 20 against a spread of 10 (9's repeats;
    10's spread 8), and stands."""
    peaks = {b: [880.0 + 10 * b] * 3 for b in range(1, 9)}
    peaks[9] = [970.0, 980.0, 975.0]
    peaks[10] = [990.0, 998.0, 992.0]
    peaks[11] = [1002.0, 1014.0, 1008.0]
    probe, calls = noisy(peaks, 1000)

    def below(top: int) -> Search:
        return guided(probe, 1000, top, 10, max_batch=top)

    search = confirmed(guided(probe, 1000, 10, 10, max_batch=64), probe, 3, 1, below, 1000)
    assert (search.largest_fit, search.smallest_non_fit) == (9, 10)
    assert sorted(c for c in calls if c[0] in (9, 11)) == [
        (9, 1),
        (9, 2),
        (9, 3),
        (11, 1),
        (11, 2),
        (11, 3),
    ]
    assert calls.count((10, 2)) == 1  # the demoted answer's repeats are not measured again
    found = boundary(distinct(search.probes), 1000, 9, 10)
    assert found["margin_bytes"] == 20 and found["spread_bytes"] == 10


def test_the_noise_rule_steps_down_by_the_micro_batch_count_and_can_leave_none():
    """accumulate-4: 8 fits every run but with 4 MiB to spare against a spread of 40, so
    the search goes on at 4, whose runs spread as wide with as little room: no answer
    stands (0), and 4, the smallest, is the next batch."""
    peaks = {4: [956.0, 996.0, 960.0], 8: [990.0, 996.0, 992.0], 12: [1010.0, 1050.0, 1020.0]}
    probe, calls = noisy(peaks, 1000)

    def below(top: int) -> Search:
        return guided(probe, 1000, top, 10, step=4, max_batch=top)

    search = confirmed(guided(probe, 1000, 8, 10, step=4, max_batch=64), probe, 3, 4, below, 1000)
    assert (search.largest_fit, search.smallest_non_fit) == (0, 4)
    assert all(batch % 4 == 0 for batch, _ in calls)
    assert sorted(set(calls)) == [(b, k) for b in (4, 8, 12) for k in (1, 2, 3)]


def test_an_answer_measured_on_a_busy_host_has_no_speed():
    from membench.records import Cell, Record

    def record(share: float, speed: float) -> Record:
        metrics = {"throughput_samples_per_second": speed, "host_foreign_cpu_share": share}
        return Record(Cell("w", "f", "s", 4, "p"), "ok", metrics=metrics)

    assert answer_speed([record(0.5, 9.0), record(0.3, 8.0)]) == (None, 0.3)
    assert answer_speed([record(0.5, 9.0), record(0.02, 8.0), record(0.04, 7.0)]) == (7.5, 0.04)


def test_a_host_budget_finds_the_calibration_fitted_on_the_host_peak():
    """The whole-life budget is calibrated by the host peak the calibration was fitted on:
    without this, every host search would fall back to the spec-only model."""
    from membench.capacity.first_guess import calibrated_layer
    from membench.memory.memory_model import MEASURED

    assert calibrated_layer(budget_for("cpu", 2**30).layer) == MEASURED["cpu"]
    assert calibrated_layer("peak_device_allocated_bytes") == "peak_device_allocated_bytes"


def test_a_compiled_guess_is_made_once_per_search_and_only_for_a_host_budget(monkeypatch, tmp_path):
    """The compiler's guess is kept beside the probes (a resumed search compiles nothing),
    asked again for another budget, and never made for a budget it does not predict."""
    from membench.capacity import first_guess as cap
    from membench.capacity.compiled_guess import CompiledPrediction

    made = []

    def compiled(*args, **kwargs):
        made.append(args)
        return CompiledPrediction(24, 20 * MIB, 400 * MIB, "XLA", measured_batches=(4, 16))

    monkeypatch.setattr(cap, "compiled_guess", compiled)
    monkeypatch.setattr(cap, "compiled_memory_module", lambda framework: "a.module")
    monkeypatch.setattr(cap, "model_guess", lambda *a, **k: cap.Guess(10, MIB, "spec-only"))
    kept = tmp_path / "probes-guesses" / "transformer_jax_baseline.json"
    host = budget_for("cpu", 2**30)

    def guess(budget, where=kept):
        return cap.search_guess("transformer", "jax", "baseline", "smoke", budget, "m", 256, where)

    first, again = guess(host), guess(host)
    assert first == again == cap.Guess(24, 20 * MIB, "XLA", 400 * MIB, (4, 16))
    assert len(made) == 1 and json.loads(kept.read_text())["budget_bytes"] == 2**30
    assert guess(Budget(2**31, host.layer, enforced=False)).batch == 24 and len(made) == 2
    kept.write_text("{not json")  # a kept file that cannot be read: made again
    assert guess(host).batch == 24 and len(made) == 3
    device = Budget(2**30, "peak_device_allocated_bytes", enforced=False)
    assert guess(device, None).basis == "spec-only" and len(made) == 3


def test_a_bisection_search_makes_no_compiled_guess(fake_framework, store, monkeypatch):
    from membench.capacity import first_guess as cap

    def never(*args, **kwargs):
        raise AssertionError("bisection uses no guess: nothing to compile")

    monkeypatch.setattr(cap, "compiled_guess", never)
    monkeypatch.setattr(cap, "compiled_memory_module", lambda framework: "a.module")
    budget = budget_for("cpu", 2**40)
    result = capacity("fake-work", "fake", "baseline", "smoke", budget, store, max_batch=2,
                      guide=False)  # fmt: skip
    assert result.search == "bisection" and result.largest_fit == 2
    assert not (store.root.parent / "probes-guesses").exists()


def test_asv_gets_no_speed_from_an_answer_measured_on_a_busy_host():
    from asv_runner.benchmarks.mark import SkipNotImplemented

    from membench.publish.asv_suite import CapacityBenchmarks

    def tracked(share: float | None) -> float:
        bench = CapacityBenchmarks()
        bench.result = CapacityResult(
            "resnet50", "torch", "baseline", "smoke", 2**30, "life", False, "", 44, 45, "ok",
            "", [], 3.48, foreign_cpu_share_at_fit=share,
        )  # fmt: skip
        return bench.track_throughput_at_capacity("torch", "baseline")

    assert tracked(0.02) == 3.48 and tracked(None) == 3.48
    with pytest.raises(SkipNotImplemented, match="busy host: 68%"):
        tracked(0.68)


def test_a_disk_compile_cache_is_warmed_at_the_two_smallest_batches_a_search_probes():
    """Jittor keeps kernels on disk and compiles others where a dimension is 1: its cache is
    warmed at the strategy's step and twice it (accumulate-4: micro-batches 1 and 2) before
    the search, and the result says what those cells' compilers held; JAX keeps none on disk
    (each probe compiles in its own process): nothing is measured."""
    from membench.cells.compile_cache import warm_cache
    from membench.metrics import LIFE_OTHERS_METRIC
    from membench.records import Cell, Record

    measured: list[int] = []

    def measure(batch: int) -> Record:
        measured.append(batch)
        cell = Cell("transformer", "jittor", "accumulate-4", batch, "cpu-capacity")
        held = {4: 1013 * MIB, 8: 318 * MIB}[batch]
        return Record(cell, "ok", metrics={LIFE_OTHERS_METRIC: held})

    said = warm_cache("jittor", "accumulate-4", 4, measure)
    assert measured == [4, 8]
    assert said == (
        "compile cache on disk, warmed by cells at batches 4 (ok, its other processes held "
        "1013 MiB) and 8 (ok, its other processes held 318 MiB) before the search"
    )
    measured.clear()
    assert warm_cache("jax", "baseline", 1, measure).startswith("no compile cache on disk")
    assert measured == []


def test_the_steady_state_peak_stands_beside_a_host_budget_only():
    """On a GPU the budget is the device's peak; the measured steps' host RSS (1.4 GB beside
    the H200's 24 GB) is another memory, not that budget's steady state."""
    from membench.records import Cell, Record

    metrics = {
        "peak_device_allocated_bytes": 20 * 2**30, "peak_host_rss_bytes": 1.4 * 2**30,
        "life_peak_host_rss_bytes": 2 * 2**30,
    }  # fmt: skip
    record = Record(Cell("resnet50", "torch", "baseline", 256, "gpu-quick"), "ok", metrics=metrics)
    device = fits(record, Budget(24 * 2**30, "peak_device_allocated_bytes", enforced=True))
    assert device.fits and device.peak_bytes == 20 * 2**30 and device.steady_peak_bytes is None
    host = fits(record, Budget(3 * 2**30, "life_peak_host_rss_bytes", enforced=False))
    assert host.peak_bytes == 2 * 2**30 and host.steady_peak_bytes == 1.4 * 2**30


def test_a_torch_device_search_is_read_again_on_the_reserve_its_limit_binds(tmp_path):
    """torch's memory fraction caps the caching allocator's reserve: a settled search kept on
    the allocated peak is read again on the reserve from its stored records (the H200's GPT-2
    amp-bf16-checkpoint: 28 fitted with 5.3 GiB allocated to spare, 29 ran out of memory);
    verdicts and answer stay, a record that would change a verdict is refused."""
    from membench.capacity.search import repeat_store, reread
    from membench.capacity.search_steps import framework_budget
    from membench.records import Cell, Record, RecordStore
    from membench.registry import strategy

    gib = 2**30
    store = RecordStore(tmp_path / "probes")
    cell = Cell("transformer", "torch", "amp-bf16-checkpoint", 28, "gpu-quick")
    peaks = {"peak_device_allocated_bytes": 18.7 * gib, "peak_device_reserved_bytes": 23.6 * gib}
    ok = Record(cell, "ok", metrics=peaks)
    store.put(ok)
    repeat_store(store, 2).put(ok)
    over = Record(Cell("transformer", "torch", "amp-bf16-checkpoint", 29, "gpu-quick"), "oom")
    store.put(over)
    allocated = Budget(24 * gib, "peak_device_allocated_bytes", enforced=True)
    reserve = framework_budget(allocated, "torch", strategy("amp-bf16-checkpoint"))
    assert reserve.layer == "peak_device_reserved_bytes" and reserve.enforced
    probes = [fits(ok, allocated), fits(ok, allocated, 2), fits(over, allocated)]
    before = CapacityResult(
        "transformer", "torch", "amp-bf16-checkpoint", "gpu-quick", 24 * gib, allocated.layer,
        True, allocated.note, 28, 29, "ok", "", [asdict(p) for p in probes],
        **boundary(probes, 24 * gib, 28, 29),
    )  # fmt: skip
    assert before.margin_bytes == pytest.approx(5.3 * gib)
    after = reread(before, store.root)
    assert after.budget_layer == "peak_device_reserved_bytes"
    assert after.margin_bytes == pytest.approx(0.4 * gib)
    assert (after.largest_fit, after.smallest_non_fit) == (28, 29)
    assert [p["fits"] for p in after.probes] == [True, True, False]
    assert after.fit_peaks_bytes == [23.6 * gib, 23.6 * gib] and after.spread_bytes == 0
    assert reread(after, store.root) == after  # read again, nothing changes
    # repeats spread wider on the reserve than its margin: the noise rule would have put it down
    spread_out = {**peaks, "peak_device_reserved_bytes": 22.9 * gib}
    repeat_store(store, 2).put(Record(cell, "ok", metrics=spread_out))
    with pytest.raises(ValueError, match="within noise"):
        reread(replace(before, noise_room=True), store.root)
    assert reread(before, store.root).spread_bytes == pytest.approx(0.7 * gib)  # no such rule
    store.put(Record(cell, "ok", metrics={**peaks, "peak_device_reserved_bytes": 24.5 * gib}))
    with pytest.raises(ValueError, match="would change"):
        reread(before, store.root)


def test_a_cards_whole_budget_sets_each_frameworks_limit_below_it_by_its_measured_overhead():
    """--whole-card: the budget is NVML's process figure; torch's limit is the budget less
    the overhead its records measured, and a probe fits on the process figure, not the
    allocator's: the H200's verified 289 held 25,198 MiB, over a 24 GiB card."""
    from membench import registry
    from membench.capacity.search import limit_margin
    from membench.capacity.search_steps import framework_budget
    from membench.records import Cell, Record

    card = budget_for("cuda", 24 * 2**30, (("torch", 760 * MIB, "median of 24"),))
    torch = framework_budget(card, "torch", registry.strategy("baseline"))
    assert torch.whole_card and torch.enforced and torch.layer == "peak_device_process_bytes"
    assert torch.limit == 24 * 2**30 - 760 * MIB and "23,816 MiB" in torch.note
    assert budget_for("cuda", 24 * 2**30).limit == 24 * 2**30  # the allocator's limit alone

    def probe(process_mib: float, reserved_mib: float) -> Record:
        metrics = {"peak_device_process_bytes": process_mib * MIB,
                   "peak_device_reserved_bytes": reserved_mib * MIB}  # fmt: skip
        return Record(Cell("resnet50", "torch", "baseline", 289, "gpu-quick"), "ok", "", metrics)

    assert not fits(probe(25_198, 24_438), torch).fits
    assert fits(probe(24_500, 23_740), torch).fits
    margins = limit_margin(torch, "torch", [probe(24_500, 23_740)])
    assert margins == {"limit_bytes": torch.limit, "limit_margin_bytes": 76 * MIB}


def test_a_cards_whole_budget_takes_the_overheads_the_gpu_records_measured(monkeypatch, capsys):
    """The committed H200 records: torch's process holds at most 762 MiB beyond its reserve,
    JAX's at most 638 beyond its preallocated pool (which it holds at every batch, so the
    limit leaves the highest and a margin, not the median); Jittor's none measured, so a
    whole-card search of Jittor is refused before any probe."""
    from membench import environment
    from membench.commands.capacity import card_overheads

    monkeypatch.setattr(environment, "gpu_info", lambda: {"device_name": "NVIDIA H200"})
    found, missing = card_overheads("resnet50", ["torch", "jax", "jittor"])
    overhead = {f: b / MIB for f, b, _ in found}
    assert overhead["torch"] == pytest.approx(762 + 64, abs=1)
    assert overhead["jax"] == pytest.approx(638 + 64, abs=1) and missing == ["jittor"]

    monkeypatch.setattr(environment, "detected_device", lambda: "cuda")
    monkeypatch.setattr(
        environment, "gpu_info", lambda: {"device_name": "NVIDIA H200", "gpu_memory_bytes": 2**37}
    )
    args = ["capacity", "-w", "resnet50", "-f", "jittor", "-p", "gpu-quick", "--whole-card"]
    assert cli.main([*args, "--budget", "24GiB"]) == 2
    assert "no GPU record measures jittor's process overhead" in capsys.readouterr().err


def test_a_cards_whole_budget_judges_only_the_process_own_figure():
    """Where NVML listed no PID and the figure is the device's less a baseline, side by side
    it would count the other workers: the probe decides nothing."""
    from membench import registry
    from membench.capacity.search_steps import NO_PEAK, framework_budget
    from membench.records import Cell, Record

    card = budget_for("cuda", 24 * 2**30, (("torch", 824 * MIB, "highest of 24 + 64 MiB"),))
    torch = framework_budget(card, "torch", registry.strategy("baseline"))
    record = Record(
        Cell("resnet50", "torch", "baseline", 8, "gpu-quick"), "ok", "",
        {"peak_device_process_bytes": 2**30}, environment={"nvml_method": "device-minus-baseline"},
    )  # fmt: skip
    assert fits(record, torch).status == NO_PEAK


def test_card_runs_stay_apart_from_the_allocator_limits_runs(tmp_path):
    from membench import paths

    for card in (False, True):
        run = paths.capacity_run("gpu-box", "gpu-quick", 24 * 2**30, "a" * 40, tmp_path, card)
        run.mkdir(parents=True)
        (run / paths.CAPACITY_FILE).write_text("[]")
    (plain,) = paths.capacity_files(tmp_path, machine="gpu-box")
    (card,) = paths.capacity_files(tmp_path, machine="gpu-box", whole_card=True)
    assert plain.parent.name == f"gpu-quick-24576mib-{'a' * 12}"
    assert card.parent.name == f"gpu-quick-24576mib-card-{'a' * 12}"


def test_searches_side_by_side_need_a_budget_to_share_the_device_out(monkeypatch, capsys):
    from membench import environment

    monkeypatch.setattr(environment, "detected_device", lambda: "cuda")
    monkeypatch.setattr(
        environment, "gpu_info", lambda: {"device_name": "NVIDIA H200", "gpu_memory_bytes": 2**37}
    )
    args = ["capacity", "-w", "resnet50", "-f", "torch", "-p", "gpu", "--side-by-side", "2"]
    assert cli.main(args) == 2
    assert "--side-by-side shares the device out: give --budget" in capsys.readouterr().err
