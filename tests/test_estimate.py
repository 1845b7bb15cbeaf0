"""The run's time estimate: what each cell's estimate rests on, and its correction as cells
finish."""

import pytest

from membench.cells.estimate import KEPT, REFUSED, Forecast, History, forecast, prior_seconds
from membench.records import Cell, Record, RecordStore


def cell(strategy="baseline", batch=2, framework="torch", workload="resnet50"):
    return Cell(workload, framework, strategy, batch, "cpu")


def done(c: Cell, seconds: float, **env) -> Record:
    return Record(c, "ok", wall_seconds=seconds, environment=env)


def test_an_estimate_comes_from_the_same_cell_then_its_group_then_the_prior():
    history = History([done(cell(), 30.0), done(cell(), 50.0), done(cell("infer"), 10.0)])
    assert (history.estimate(cell()).seconds, history.estimate(cell()).basis) == (40.0, "this cell")
    other = history.estimate(cell("checkpoint", 8))  # same framework x workload x preset
    assert other.seconds == 30.0 and other.basis == "framework x workload"
    unseen = history.estimate(cell(framework="jax"))
    assert unseen.seconds == prior_seconds("jax") and unseen.basis == "prior"
    assert (
        history.estimate(cell(), refused=True).seconds == 0
        and REFUSED in history.estimate(cell(), refused=True).basis
    )


def test_a_cell_new_to_this_host_is_estimated_from_its_records_on_other_hosts():
    elsewhere = [done(cell(), 20.0, machine="b"), done(cell(), 40.0, machine="b"),
                 done(cell("infer"), 5.0, machine="b")]  # fmt: skip
    history = History([done(cell("checkpoint", 8), 90.0)], elsewhere)
    found = history.estimate(cell())  # this host measured the workload, not this cell
    assert (found.seconds, found.basis) == (30.0, "this cell on other hosts (unscaled)")
    here = History([done(cell(), 12.0)], elsewhere).estimate(cell())  # this host's own first
    assert (here.seconds, here.basis) == (12.0, "this cell")


def test_another_hosts_times_are_scaled_by_how_this_host_compared_on_shared_cells():
    shared = [cell(s) for s in ("infer", "checkpoint", "amp-bf16", "accumulate-4", "compile")]
    there = [done(c, 10.0, machine="b") for c in shared] + [done(cell(), 30.0, machine="b")]
    here = [done(c, 20.0) for c in shared]  # this host took twice as long on each
    history = History(here, there)
    assert history.speed_ratio("b") == 2.0
    found = history.estimate(cell(batch=9, framework="jax"))  # measured by neither: prior
    assert found.basis == "prior"
    found = history.estimate(cell())
    assert (found.seconds, found.basis) == (
        60.0, "this cell on other hosts (scaled by this host's speed on shared cells)"
    )  # fmt: skip
    assert History(here[:4], there).speed_ratio("b") is None  # too few shared cells to say


def test_refusals_and_records_without_a_wall_time_teach_nothing():
    refused = done(cell("compile"), 0.2, refused_at="plan")
    history = History([refused, done(cell("infer"), 0.0)])
    assert history.estimate(cell("compile")).basis == "prior"


def test_the_remaining_estimate_is_corrected_by_the_cells_that_finished():
    a, b, c = cell("baseline"), cell("infer"), cell("checkpoint")
    plan = Forecast({x: History([]).estimate(x) for x in (a, b, c)})
    prior = prior_seconds("torch")
    assert plan.total_seconds() == plan.remaining_seconds() == 3 * prior
    plan.done(done(a, 2 * prior), reused=False)  # took twice its estimate
    assert plan.remaining_seconds() == pytest.approx(2 * 2 * prior)
    plan.done(Record(b, "ok", wall_seconds=1.0), reused=True)  # kept: no correction
    assert plan.remaining_seconds() == pytest.approx(2 * prior)
    assert plan.rows() == [{"framework": "torch", "workload": "resnet50", "cells": 3,
                            "minutes": 3 * prior / 60, "basis": "3 prior"}]  # fmt: skip


def test_a_run_s_forecast_reads_its_store_and_the_declarations(tmp_path):
    store = RecordStore(tmp_path / "store")
    store.put(done(cell(), 12.0))
    failed = cell("checkpoint")
    store.put(Record(failed, "error", "boom", wall_seconds=30.0))
    jax_compile = cell("compile", framework="jax")
    plan = forecast([cell(), failed, jax_compile], store, "no-such-machine")
    # a resumed run keeps the stored ok cell: it costs nothing; the error is measured again
    assert (plan.estimates[cell()].seconds, plan.estimates[cell()].basis) == (0.0, KEPT)
    assert plan.estimates[failed].seconds == 30.0
    assert plan.estimates[jax_compile].basis == REFUSED
    assert plan.total_seconds() == 30.0
    # --fresh measures the stored cell again (its own earlier time); --keep-failed keeps the error
    fresh = forecast([cell()], store, "no-such-machine", fresh=True)
    assert fresh.estimates[cell()].seconds == 12.0
    keep = forecast([failed], store, "no-such-machine", retry_failed=False)
    assert keep.estimates[failed].basis == KEPT


def test_a_strategy_seen_at_another_batch_scales_its_time_above_start_up_by_the_batch():
    history = History([
        done(cell("infer", 1), 10.0),  # the group's fastest cell: start-up and build
        done(cell("baseline", 2), 40.0),
        Record(cell("amp-fp16", 2), "unsupported", "refused by the worker", wall_seconds=3.0),
    ])  # fmt: skip
    found = history.estimate(cell("baseline", 8))
    assert (found.seconds, found.basis) == (10.0 + 30.0 * 8 / 2, "this strategy at another batch")
    # a worker's quick refusal is not a measured cell: the group's median is of ok cells
    assert history.estimate(cell("checkpoint", 2)).seconds == 25.0
    # no estimate exceeds the cell's time limit: the preset's (resnet50 on cpu: 900 s) or given
    assert history.estimate(cell("baseline", 128)).seconds == 900.0
    assert history.estimate(cell("baseline", 8), limit=60.0).seconds == 60.0


def test_where_a_record_says_its_steps_only_they_scale_with_the_batch():
    """A JAX cell of 18 s at batch 4 spends 1.5 s in its steps after the first (3 warm-up and
    3 measured steps of 0.25 s); the rest (start-up, build, compilation) does not grow, so
    batch 128 is 16.5 + 1.5 x 32 s, not 32 times the time above the group's fastest cell."""
    measured = Record(
        cell("baseline", 4, "jax"), "ok", wall_seconds=18.0,
        metrics={"step_seconds_mean": 0.25, "warmup_steps": 3.0}, step_times=[0.25] * 3,
    )  # fmt: skip
    history = History([done(cell("infer", 4, "jax"), 8.0), measured])
    found = history.estimate(cell("baseline", 128, "jax"))
    assert found.seconds == pytest.approx(16.5 + 1.5 * 32)
    assert found.basis == "this strategy at another batch"


def test_a_sweep_s_cell_is_estimated_from_the_same_release_before_the_cell_s_others():
    slow = done(cell(), 90.0)  # the release that runs the cell 3x slower
    history = History([done(cell(), 30.0), slow], releases=[("jax-0.11.2", slow)])
    mine = history.estimate(cell(), release="jax-0.11.2")
    assert (mine.seconds, mine.basis) == (90.0, "this cell under this release")
    other = history.estimate(cell(), release="jax-0.10.2")  # never measured: the cell's median
    assert (other.seconds, other.basis) == (60.0, "this cell")


def test_a_sweep_s_record_names_its_release_from_its_folder():
    from membench import paths

    sweep = "results/records/m/versions-releases-0123456789ab"
    assert paths.release_of(f"{sweep}/jax-0.11.2/a.json") == "jax-0.11.2"
    assert paths.release_of(f"{sweep}/round-2/jax-0.10.2-py3.12/a.json") == "jax-0.10.2-py3.12"
    assert paths.release_of("results/records/m/cpu-0123456789ab/a.json") == ""


def test_the_runner_s_own_seconds_between_cells_are_counted_for_each_cell_that_runs():
    def at(second: int, wall: float, strategy: str) -> Record:
        started = f"2026-11-29T00:00:{second:02d}+00:00"
        return Record(cell(strategy), "ok", wall_seconds=wall, started_at=started)

    # pauses of 1 s and 3 s between records; a pause past a minute is another run's
    records = [at(0, 9.0, "baseline"), at(10, 5.0, "infer"), at(18, 1.0, "checkpoint")]
    history = History([*records, Record(cell("compile"), "ok", wall_seconds=1.0,
                                        started_at="2026-11-29T01:00:00+00:00")])  # fmt: skip
    assert history.between_cells == 2.0
    plan = Forecast({cell(): history.estimate(cell()),
                     cell("amp-bf16"): history.estimate(cell("amp-bf16"), refused=True)},
                    history.between_cells)  # fmt: skip
    assert plan.total_seconds() == 9.0 + 2.0  # the refusal runs no worker: nothing around it


def test_a_sweep_s_time_is_said_against_the_estimate_it_began_with():
    from membench.commands.versions import took

    assert took(100 * 60, 90 * 60) == (
        "measured in 100.0 min; estimated 90.0 min before it began (the estimate 10% under)"
    )
