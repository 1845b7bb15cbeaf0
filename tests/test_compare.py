"""`membench compare`: direction per metric, the noise threshold, status changes, sides and
the exit status CI gates on."""

import math

import pandas as pd
import pytest

from analysis.compare import (
    BUSY,
    IMPROVEMENT,
    REGRESSION,
    UNCHANGED,
    SideError,
    compare,
    regressions,
    resolve_side,
)
from analysis.schema import COLUMNS, METRICS
from membench import cli

MIB = 2**20


def row(environment, metric, value, *, version="0.7.1", strategy="baseline", batch=2,
        status="ok", low=math.nan, high=math.nan, commit="aaaa1111", framework="jax",
        run="aaaa1111", python="3.11"):  # fmt: skip
    values = {
        "source": "record", "machine": "m", "device": "cpu", "host_cpu": "", "framework": framework,
        "framework_version": version, "environment": environment, "python": python,
        "workload": "resnet50", "strategy": strategy, "mode": "", "batch_size": batch,
        "world_size": 1, "preset": "cpu",
        "inputs": "",
        "commit": commit,
        "started_at": "2026-01-01T00:00:00+00:00", "status": status, "reason": "",
        "metric": metric, "layer": METRICS[metric].layer, "value": value,
        "unit": METRICS[metric].unit, "spread_low": low, "spread_high": high,
        "n_samples": 1, "path": f"/r/versions-cpu-{run}/{environment}/{strategy}.json",
    }  # fmt: skip
    return [values[c] for c in COLUMNS]


def frame(rows):
    return pd.DataFrame(rows, columns=COLUMNS)


def sides(rows, base="jax-0.7.1", new="jax-0.10.2"):
    f = frame(rows)
    return resolve_side(f, base), resolve_side(f, new)


def verdicts(table):
    return dict(zip(table["metric"], table["verdict"], strict=True))


def test_more_memory_is_a_regression_and_less_an_improvement():
    rows = [
        row("jax-0.7.1", "xla_temp_bytes", 182 * MIB),
        row("jax-0.10.2", "xla_temp_bytes", 260 * MIB, version="0.10.2"),
        row("jax-0.7.1", "peak_host_rss_bytes", 800 * MIB),
        row("jax-0.10.2", "peak_host_rss_bytes", 700 * MIB, version="0.10.2"),
    ]
    table = compare(*sides(rows))
    assert verdicts(table) == {"xla_temp_bytes": REGRESSION, "peak_host_rss_bytes": IMPROVEMENT}
    temp = table[table["metric"] == "xla_temp_bytes"].iloc[0]
    assert temp["change"] == pytest.approx(260 / 182 - 1)
    assert regressions(table) == 1


def test_throughput_is_better_higher():
    rows = [
        row("jax-0.7.1", "throughput_samples_per_second", 10.0),
        row("jax-0.10.2", "throughput_samples_per_second", 8.0, version="0.10.2"),
    ]
    assert verdicts(compare(*sides(rows))) == {"throughput_samples_per_second": REGRESSION}
    rows[1][COLUMNS.index("value")] = 12.0
    assert verdicts(compare(*sides(rows))) == {"throughput_samples_per_second": IMPROVEMENT}


def test_a_change_within_the_floor_is_unchanged():
    rows = [
        row("jax-0.7.1", "peak_host_rss_bytes", 1000 * MIB),
        row("jax-0.10.2", "peak_host_rss_bytes", 1040 * MIB, version="0.10.2"),
    ]
    assert verdicts(compare(*sides(rows))) == {"peak_host_rss_bytes": UNCHANGED}
    assert verdicts(compare(*sides(rows), floor=0.01)) == {"peak_host_rss_bytes": REGRESSION}


def test_the_measured_step_time_spread_raises_the_threshold_for_throughput():
    # step times with a 30% interquartile range: a 20% slowdown is within the noise
    rows = [
        row("jax-0.7.1", "step_seconds_median", 1.0, low=0.85, high=1.15),
        row("jax-0.7.1", "throughput_samples_per_second", 2.0),
        row("jax-0.10.2", "step_seconds_median", 1.25, version="0.10.2", low=1.2, high=1.3),
        row("jax-0.10.2", "throughput_samples_per_second", 1.6, version="0.10.2"),
    ]
    table = compare(*sides(rows))
    assert verdicts(table) == {"throughput_samples_per_second": UNCHANGED}
    assert table.iloc[0]["threshold"] == pytest.approx(0.30)


def test_repeated_runs_on_one_side_give_their_range_as_noise():
    rows = [
        row("jax-0.7.1", "peak_host_rss_bytes", 1000 * MIB),
        row("jax-0.7.1", "peak_host_rss_bytes", 1200 * MIB),  # a second run
        row("jax-0.10.2", "peak_host_rss_bytes", 1150 * MIB, version="0.10.2"),
    ]
    table = compare(*sides(rows))
    assert table.iloc[0]["threshold"] == pytest.approx(200 / 1100)
    assert verdicts(table) == {"peak_host_rss_bytes": UNCHANGED}


def test_speed_measured_beside_other_work_is_not_judged():
    rows = [
        row("jax-0.7.1", "throughput_samples_per_second", 10.0),
        row("jax-0.7.1", "host_foreign_cpu_share", 0.4),
        row("jax-0.10.2", "throughput_samples_per_second", 5.0, version="0.10.2"),
        row("jax-0.10.2", "host_foreign_cpu_share", 0.0, version="0.10.2"),
    ]
    table = compare(*sides(rows))
    assert verdicts(table) == {"throughput_samples_per_second": BUSY}
    assert regressions(table) == 0


def test_a_cell_that_stops_running_is_one_status_regression():
    rows = [
        row("jax-0.7.1", "peak_host_rss_bytes", 800 * MIB),
        row("jax-0.7.1", "throughput_samples_per_second", 3.0),
        row("jax-0.10.2", "peak_host_rss_bytes", math.nan, version="0.10.2", status="oom"),
        row(
            "jax-0.10.2", "throughput_samples_per_second", math.nan, version="0.10.2", status="oom"
        ),  # fmt: skip
    ]
    table = compare(*sides(rows))
    assert list(table["metric"]) == ["status"]
    assert table.iloc[0]["verdict"] == REGRESSION and table.iloc[0]["new"] == "oom"
    reverse = compare(*sides(rows, base="jax-0.10.2", new="jax-0.7.1"))
    assert list(reverse["verdict"]) == [IMPROVEMENT]


def test_sides_resolve_environments_versions_and_commits():
    rows = [
        row(
            "default",
            "peak_host_rss_bytes",
            1.0,
            framework="torch",
            version="2.13.0+cpu",
            commit="cafe0001",
        ),  # fmt: skip
        row("jax-0.10.2", "peak_host_rss_bytes", 2.0, version="0.10.2", commit="beef0002"),
    ]
    f = frame(rows)
    assert resolve_side(f, "default").kind == "environment"
    assert resolve_side(f, "torch-2.13.0").kind == "version"  # the +cpu build tag is optional
    assert resolve_side(f, "beef").kind == "commit"
    with pytest.raises(SideError, match="jax-0.10.2.*torch-2.13.0"):
        resolve_side(f, "jax-9.9")


def test_cli_exit_status_is_1_on_a_regression_and_0_without(tmp_path, monkeypatch):
    rows = [
        row("jax-0.7.1", "xla_temp_bytes", 182 * MIB),
        row("jax-0.10.2", "xla_temp_bytes", 260 * MIB, version="0.10.2"),
    ]
    monkeypatch.setattr("analysis.loader.load", lambda _: _Loaded(frame(rows)))
    assert cli.main(["compare", "jax-0.7.1", "jax-0.10.2", "--results", str(tmp_path)]) == 1
    assert cli.main(["compare", "jax-0.10.2", "jax-0.7.1", "--results", str(tmp_path)]) == 0
    assert cli.main(["compare", "jax-0.7.1", "nothing", "--results", str(tmp_path)]) == 2


class _Loaded:
    def __init__(self, frame):
        self.frame, self.problems, self.unreadable = frame, [], []


def test_a_change_counts_only_above_the_metrics_absolute_floor_too():
    from membench.metrics import change_floor

    assert change_floor("peak_host_rss_bytes") == 16 * MIB
    assert change_floor("xla_temp_bytes") == 1 * MIB
    assert change_floor("step_seconds_median") == 0.001
    rows = [  # +75%, but 0.3 MiB: noise in a process's resident memory
        row("jax-0.7.1", "peak_host_rss_delta_bytes", 0.4 * MIB),
        row("jax-0.10.2", "peak_host_rss_delta_bytes", 0.7 * MIB, version="0.10.2"),
        row("jax-0.7.1", "peak_host_rss_bytes", 100 * MIB),
        row("jax-0.10.2", "peak_host_rss_bytes", 130 * MIB, version="0.10.2"),
    ]
    assert verdicts(compare(*sides(rows))) == {
        "peak_host_rss_delta_bytes": UNCHANGED, "peak_host_rss_bytes": REGRESSION,
    }  # fmt: skip


def test_a_compile_time_counts_only_above_a_tenth_of_a_second():
    """45911b3d -> 8030c241 (committed): torch's compile time at accumulate-4, batch 8, went
    34.4 -> 74.4 ms (asv compare: 2.16x worse); one first step's noise, not a regression."""
    from membench.metrics import change_floor

    assert change_floor("compile_seconds") == change_floor("first_step_seconds") == 0.1
    rows = [
        row("jax-0.7.1", "compile_seconds", 0.0344),
        row("jax-0.10.2", "compile_seconds", 0.0744, version="0.10.2"),
        row("jax-0.7.1", "first_step_seconds", 9.14),
        row("jax-0.10.2", "first_step_seconds", 10.2, version="0.10.2"),
    ]
    table = compare(*sides(rows), metrics=["compile_seconds", "first_step_seconds"])
    assert verdicts(table) == {"compile_seconds": UNCHANGED, "first_step_seconds": REGRESSION}


def test_a_version_names_every_run_of_it_as_the_version_table_does():
    from analysis.history import version_history

    rows = [
        row("default", "peak_host_rss_bytes", 1000 * MIB, commit="aaaa1111"),
        row("jax-0.7.1", "peak_host_rss_bytes", 800 * MIB, commit="bbbb2222"),
        row("jax-0.7.1", "peak_host_rss_bytes", 900 * MIB, commit="bbbb2222"),
        row("jax-0.10.2", "peak_host_rss_bytes", 950 * MIB, version="0.10.2"),
    ]
    rows[1][COLUMNS.index("path")] = "/r/jax-0.7.1/a.json"
    f = frame(rows)
    side = resolve_side(f, "jax-0.7.1")
    assert side.kind == "version" and len(side.rows) == 3  # both environments' runs
    (table,) = version_history(f).values()
    median = float(side.rows["value"].median()) / MIB
    assert table["0.7.1"].iloc[0] == f"{median:,.0f}"  # the same records, the same figure
    assert resolve_side(f, "default").kind == "environment"


def test_the_compare_table_names_metrics_in_full(capsys, monkeypatch):
    from rich.console import Console

    monkeypatch.setattr("membench.commands.compare.console", Console(width=250))
    assert cli.main(["compare", "45911b3d", "8030c241", "--all", "-w", "resnet50", "-b", "2"]) in (
        0, 1,
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "host RSS added by a step" in out and "peak host RSS" in out
    assert "peak_host_rss_" not in out and "…" not in out


def test_speed_left_unjudged_is_counted_only_for_cells_the_new_side_measured():
    """A speed measured in another run than the new side's is not judged; a base cell the new
    side never measured is no pair, and not counted among them (jittor 1.3.10 had 12)."""
    from analysis.compare import SPEED_APART

    rows = [
        row("jax-0.7.1", "throughput_samples_per_second", 10.0, run="aaaa"),
        row("jax-0.10.2", "throughput_samples_per_second", 9.0, version="0.10.2", run="bbbb"),
        row("jax-0.7.1", "throughput_samples_per_second", 10.0, strategy="checkpoint", run="aaaa"),
    ]
    table = compare(*sides(rows))
    assert table.empty or "throughput_samples_per_second" not in set(table["metric"])
    assert table.attrs.get(SPEED_APART, 0) == 1
    # a base measured in the new side's run too: judged there, so not counted as unjudged
    rows.append(row("jax-0.7.1", "throughput_samples_per_second", 10.0, run="bbbb"))
    table = compare(*sides(rows))
    assert verdicts(table)["throughput_samples_per_second"] == REGRESSION
    assert table.attrs.get(SPEED_APART, 0) == 0


def test_sides_with_no_cell_in_common_say_where_each_was_measured(capsys, monkeypatch):
    rows = [
        row("jax-0.10.2", "peak_host_rss_bytes", 100 * MIB, version="0.10.2"),
        row("jax-0.11.2", "peak_host_rss_bytes", 100 * MIB, version="0.11.2"),
    ]
    rows[1][COLUMNS.index("machine")] = "gpu-box"
    rows[1][COLUMNS.index("preset")] = "gpu-quick"
    monkeypatch.setattr("analysis.loader.load", lambda _: _Loaded(frame(rows)))
    assert cli.main(["compare", "jax-0.10.2", "jax-0.11.2"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "jax-0.10.2 was measured on m (cpu), jax-0.11.2 on gpu-box (gpu-quick)" in out


def test_the_table_names_the_machine_and_preset_where_rows_come_from_several(capsys, monkeypatch):
    from rich.console import Console

    rows = [
        row("jax-0.7.1", "peak_host_rss_bytes", 100 * MIB),
        row("jax-0.10.2", "peak_host_rss_bytes", 200 * MIB, version="0.10.2"),
    ]
    other = [list(r) for r in rows]
    for r in other:
        r[COLUMNS.index("machine")] = "label-box"
    monkeypatch.setattr("membench.commands.compare.console", Console(width=250))
    monkeypatch.setattr("analysis.loader.load", lambda _: _Loaded(frame(rows + other)))
    assert cli.main(["compare", "jax-0.7.1", "jax-0.10.2"]) == 1
    out = capsys.readouterr().out
    assert "machine" in out and "label-box" in out and "preset" not in out.split("\n")[1]
    monkeypatch.setattr("analysis.loader.load", lambda _: _Loaded(frame(rows)))
    assert cli.main(["compare", "jax-0.7.1", "jax-0.10.2"]) == 1
    assert "machine" not in capsys.readouterr().out  # one machine: no column for it


def test_a_release_measured_on_two_interpreters_is_named_by_its_environment():
    rows = [row("jax-0.10.2", "peak_host_rss_bytes", 1000 * MIB, version="0.10.2", run="b1"),
            row("jax-0.10.2-py3.12", "peak_host_rss_bytes", 1100 * MIB, version="0.10.2",
                python="3.12", run="b1"),
            row("jax-0.11.2", "peak_host_rss_bytes", 1102 * MIB, version="0.11.2",
                python="3.12", run="b1")]  # fmt: skip
    f = frame(rows)
    plain = resolve_side(f, "jax-0.10.2")  # not pooled with the bridge's Python 3.12 runs
    assert (plain.kind, set(plain.rows["python"])) == ("environment", {"3.11"})
    bridge, new = resolve_side(f, "jax-0.10.2-py3.12"), resolve_side(f, "jax-0.11.2")
    table = compare(bridge, new, ["peak_host_rss_bytes"])
    assert table["verdict"].tolist() == ["unchanged"]  # jax's change, the interpreter's apart
    assert compare(plain, bridge, ["peak_host_rss_bytes"])["verdict"].tolist() == ["regression"]
