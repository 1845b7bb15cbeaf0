"""Release verdicts on synthetic histories: each release against the one before it, and the
release that brought a lasting change (asv's step detection over the chain)."""

import math

import pandas as pd

from analysis.releases import first_releases, pair_verdicts, summary_lines
from analysis.schema import COLUMNS, METRICS

MIB = 2**20
RELEASES = ["0.7.1", "0.8.3", "0.9.2", "0.10.2"]


def rows(metric, values, *, sweep="versions-releases-aaaa", framework="jax", low=None,
         high=None, builds=None):  # fmt: skip
    out = []
    for i, (release, value) in enumerate(zip(RELEASES, values, strict=False)):
        version = release + (f"+{builds[i]}" if builds else "")
        base = {
            "source": "record", "machine": "m", "device": "cpu", "host_cpu": "",
            "framework": framework, "framework_version": version,
            "environment": f"{framework}-{release}", "workload": "resnet50",
            "strategy": "baseline", "batch_size": 4, "world_size": 1, "preset": "releases",
            "commit": "aaaa", "started_at": "2026-01-01T00:00:00+00:00", "status": "ok",
            "reason": "", "n_samples": 1, "spread_low": math.nan, "spread_high": math.nan,
            "path": f"/r/records/m/{sweep}/{framework}-{release}/resnet50.json",
        }  # fmt: skip
        out.append({**base, "metric": metric, "layer": METRICS[metric].layer,
                    "unit": METRICS[metric].unit, "value": value})  # fmt: skip
        if low is not None:  # the step times' quartiles (throughput's noise)
            median = 4 / value
            out.append({**base, "metric": "step_seconds_median", "layer": "speed", "unit": "s",
                        "value": median, "spread_low": median * (1 - low[i]),
                        "spread_high": median * (1 + high[i])})  # fmt: skip
    return out


def frame(*parts):
    return pd.DataFrame([r for p in parts for r in p], columns=COLUMNS)


def test_a_lasting_step_is_attributed_to_the_release_that_brought_it():
    f = frame(rows("peak_host_rss_bytes", [v * MIB for v in (1000, 1004, 1400, 1398)]))
    (step,) = first_releases(f).to_dict("records")
    assert (step["release"], step["previous"], step["verdict"]) == ("0.9.2", "0.8.3", "regression")
    assert step["persists"] and 0.39 < step["change"] < 0.40  # the levels: ~1002 -> ~1399
    verdicts = pair_verdicts(f).set_index("new_release")["verdict"].to_dict()
    assert verdicts == {"0.8.3": "unchanged", "0.9.2": "regression", "0.10.2": "unchanged"}


def test_changes_below_the_memory_floor_are_unchanged_and_no_step():
    f = frame(rows("peak_host_rss_bytes", [v * MIB for v in (1000, 1012, 996, 1009)]))
    assert first_releases(f).empty
    assert set(pair_verdicts(f)["verdict"]) == {"unchanged"}


def test_speed_within_its_measured_noise_is_unchanged_and_beyond_it_is_judged():
    noisy = rows("throughput_samples_per_second", [10.0, 11.5, 10.2, 6.0],
                 low=[0.1] * 4, high=[0.1] * 4)  # fmt: skip
    table = pair_verdicts(frame(noisy)).set_index("new_release")
    assert table.loc["0.8.3", "verdict"] == "unchanged"  # +15%, but the steps spread 20%
    assert table.loc["0.10.2", "verdict"] == "regression"  # -41%: slower beyond the noise
    assert math.isclose(table.loc["0.8.3", "threshold"], 0.2)


def test_speed_of_releases_in_different_sweeps_is_never_compared():
    first = rows("throughput_samples_per_second", [10.0, 10.0], low=[0.01] * 2, high=[0.01] * 2)
    other = rows("throughput_samples_per_second", [10.0, 10.0, 5.0], sweep="versions-releases-bbbb",
                 low=[0.01] * 3, high=[0.01] * 3)  # fmt: skip
    other = [r for r in other if "0.9.2" in r["path"]]  # 0.9.2 measured on another day
    table = pair_verdicts(frame(first, other))
    assert set(table["new_release"]) == {"0.8.3"}  # 0.8.3 -> 0.9.2 spans two sweeps: no verdict


def test_builds_of_a_framework_form_chains_of_their_own():
    f = frame(rows("peak_host_rss_bytes", [v * MIB for v in (500, 900, 905, 1100)],
                   framework="torch", builds=["cpu", "cu130", "cu130", "cu132"]))  # fmt: skip
    table = pair_verdicts(f)
    assert list(
        zip(table["base_release"], table["new_release"], table["verdict"], strict=True)
    ) == [
        ("0.8.3+cu130", "0.9.2+cu130", "unchanged"),
        # a default build's CUDA comes with its release: the release's change
        ("0.9.2+cu130", "0.10.2+cu132", "regression"),
    ]  # the CPU build's +400 MiB is a build's, not a release's


def test_the_summary_names_each_pair_and_its_largest_change():
    f = frame(rows("peak_host_rss_bytes", [v * MIB for v in (1000, 1004, 1400, 1398)]))
    text = "\n".join(summary_lines(f, "m"))
    assert "| jax | 0.8.3 -> 0.9.2 | 1 | 0 | 0 |" in text
    assert "+396 MiB (+39%)" in text
    assert "- jax 0.9.2: 1 regression, largest peak host RSS, resnet50 baseline b4, +" in text
    assert "noise under the 5% floor" in text  # one run a cell: no noise measured beyond it


def test_a_machine_without_sweeps_has_no_release_section():
    f = frame(rows("peak_host_rss_bytes", [1000 * MIB] * 4, sweep="cpu-aaaa"))
    assert pair_verdicts(f).empty and summary_lines(f, "m") == []


def test_a_release_s_two_builds_are_set_side_by_side_apart_from_the_chain():
    cpu = rows("peak_host_rss_bytes", [500 * MIB], framework="torch", builds=["cpu"])
    default = rows("peak_host_rss_bytes", [900 * MIB], framework="torch", builds=["cu130"])
    table = pair_verdicts(frame(cpu, default))
    assert list(zip(table["base_release"], table["new_release"], table["kind"], strict=True)) == [
        ("0.7.1+cpu", "0.7.1+cu130", "build")
    ]
    assert "0.7.1+cpu -> 0.7.1+cu130 (builds) | 1 |" in "\n".join(
        summary_lines(frame(cpu, default), "m")
    )


def test_the_summary_shows_the_fullest_sweep_not_a_later_part():
    from analysis.releases import fullest_sweep

    whole = rows("peak_host_rss_bytes", [v * MIB for v in (1000, 1004, 1400, 1398)])
    part = rows("peak_host_rss_bytes", [1000 * MIB, 1000 * MIB], sweep="versions-releases-ffff")
    for r in part:
        r["started_at"] = "2026-02-01T00:00:00+00:00"  # measured later, two releases only
    assert fullest_sweep(frame(whole, part), "m") == "versions-releases-aaaa"


def test_a_change_counts_only_where_every_sweep_that_measured_it_found_it():
    """Two sweeps of the same releases: 0.8.3 -> 0.9.2 regresses by ~40% in both; 0.9.2 ->
    0.10.2 by 10% in the first, not at all in the second: the sweeps disagree, no verdict."""
    first = rows("peak_host_rss_bytes", [v * MIB for v in (1000, 1004, 1400, 1540)])
    second = rows("peak_host_rss_bytes", [v * MIB for v in (1000, 1002, 1396, 1398)],
                  sweep="versions-releases-bbbb")  # fmt: skip
    text = "\n".join(summary_lines(frame(first, second), "m"))
    assert "2 sweeps: resnet50 in 2" in text
    assert "| jax | 0.8.3 -> 0.9.2 | 1 | 0 | 0 | 0 | regression: " in text
    assert ", 2 sweeps, noise" in text
    assert "| jax | 0.9.2 -> 0.10.2 | 0 | 0 | 0 | 1 | - |" in text
    alone = "\n".join(summary_lines(frame(first), "m"))
    assert "| jax | 0.9.2 -> 0.10.2 | 1 | 0 | 0 | 0 |" in alone  # one sweep: its verdict


def test_a_step_at_the_newest_release_is_said_and_not_called_lasting():
    f = frame(rows("peak_host_rss_bytes", [v * MIB for v in (1000, 1004, 998, 1400)]))
    text = "\n".join(summary_lines(f, "m"))
    assert "- jax 0.10.2 (the newest): 1 regression, largest" in text
    assert "whether it lasts, a later release will tell" in text


def test_a_machine_named_before_its_cpu_family_was_kept_is_a_label():
    f = frame(rows("peak_host_rss_bytes", [v * MIB for v in (1000, 1004, 1400, 1398)]))
    assert "a label, not a host kind" in "\n".join(summary_lines(f, "m"))
    kind = "amd-epyc-f26m2-avx512bf16-2core-24gib"
    f["machine"] = kind
    assert "a label" not in "\n".join(summary_lines(f, kind))


def test_the_html_report_shows_each_machines_release_verdicts_as_the_summary_does():
    from analysis.report_html import _releases_html

    f = frame(rows("peak_host_rss_bytes", [v * MIB for v in (1000, 1004, 1400, 1398)]))
    html = _releases_html(f)
    assert html.startswith('<h2 id="releases">Framework releases</h2><h3>m</h3>')
    assert "<code>membench compare</code>" in html and "`" not in html
    assert "0.8.3 -&gt; 0.9.2" in html and "<li>jax 0.9.2: 1 regression, largest" in html
    assert _releases_html(frame(rows("peak_host_rss_bytes", [1000 * MIB], sweep="cpu-aaaa"))) == ""


def test_a_step_is_lasting_by_the_sweep_that_measured_the_longest_chain():
    """Sweep A measured 0.7.1 to 0.9.2, sweep B went on to 0.10.2: both find the step at
    0.9.2, and B shows it holds, so it lasts; it is not the newest release's own."""
    a = rows("peak_host_rss_bytes", [v * MIB for v in (1000, 1004, 1400)])
    b = rows("peak_host_rss_bytes", [v * MIB for v in (1000, 1002, 1398, 1401)],
             sweep="versions-releases-bbbb")  # fmt: skip
    text = "\n".join(summary_lines(frame(a, b), "m"))
    assert "- jax 0.9.2: 1 regression, largest peak host RSS, resnet50 baseline b4, " in text
    assert "(+40%), 2 sweeps, noise under the 5% floor" in text and "(the newest)" not in text


def test_a_sweep_without_a_metric_does_not_block_another_sweeps_step():
    """Sweep B measured the step's cell but not the first step's peak: A's step stands."""
    a = rows("first_step_peak_host_rss_bytes", [v * MIB for v in (1000, 1004, 1400, 1398)])
    b = rows("peak_host_rss_bytes", [v * MIB for v in (900, 900, 900, 900)],
             sweep="versions-releases-bbbb")  # fmt: skip
    text = "\n".join(summary_lines(frame(a, b), "m"))
    assert "- jax 0.9.2: 1 regression, largest peak host RSS, first step" in text


def test_a_busy_sweep_takes_no_side():
    """A speed one sweep could not judge (a busy host) neither confirms nor contradicts the
    sweep that judged it."""
    from analysis.releases import across_sweeps

    quiet = rows("throughput_samples_per_second", [10.0, 10.0, 6.0], low=[0.01] * 3,
                 high=[0.01] * 3)  # fmt: skip
    busy = rows("throughput_samples_per_second", [10.0, 10.0, 6.0], low=[0.01] * 3,
                high=[0.01] * 3, sweep="versions-releases-bbbb")  # fmt: skip
    pairs = pair_verdicts(frame(quiet, busy))
    pairs.loc[(pairs["sweep"] == "versions-releases-bbbb") & (pairs["verdict"] == "regression"),
              "verdict"] = "busy host"  # fmt: skip
    judged = across_sweeps(pairs).set_index("new_release")
    assert judged.loc["0.9.2", "verdict"] == "regression" and judged.loc["0.9.2", "sweeps"] == 1


def test_a_bridge_sets_the_interpreter_apart_from_the_release_that_needed_it():
    chain = [("0.10.2", "3.11", 1000), ("0.10.2", "3.12", 1100), ("0.11.2", "3.12", 1102),
             ("0.12.0.1", "3.12", 1400)]  # fmt: skip
    out = []
    for version, python, mib in chain:
        (row,) = rows("peak_host_rss_bytes", [mib * MIB])
        label = f"jax-{version}" + ("-py3.12" if python == "3.12" and version == "0.10.2" else "")
        path = f"/r/records/m/versions-releases-aaaa/{label}/resnet50.json"
        out.append({**row, "framework_version": version, "python": python, "environment": label,
                    "path": path})  # fmt: skip
    pairs = pair_verdicts(frame(out))
    got = pairs[["base_release", "new_release", "kind", "verdict"]].to_records(index=False).tolist()
    assert got == [
        ("0.10.2", "0.10.2 (py3.12)", "interpreter", "regression"),  # Python 3.12's, not jax's
        ("0.10.2 (py3.12)", "0.11.2 (py3.12)", "release", "unchanged"),
        ("0.11.2 (py3.12)", "0.12.0.1 (py3.12)", "release", "regression"),
    ]
    lines = "\n".join(summary_lines(frame(out), "m"))
    assert "| 0.10.2 -> 0.10.2 (py3.12), the bridge: the interpreter alone |" in lines
    # the lasting change sized from the level before it, and that level's releases named
    assert (
        "+299 MiB (+27%), noise under the 5% floor, from the level of 0.10.2 (py3.12)-0.11.2 "
        "(py3.12)" in lines
    )


def test_a_cell_the_sweep_has_not_reached_under_its_newest_release_tells_nothing_newest():
    whole = rows("peak_host_rss_bytes", [v * MIB for v in (1000, 1001, 1002, 1003)])
    stopped = rows("peak_host_rss_bytes", [v * MIB for v in (1000, 1002, 1400)])  # up to 0.9.2
    part = [{**r, "strategy": "infer"} for r in stopped]
    (step,) = first_releases(frame(whole, part)).to_dict("records")
    assert (step["strategy"], step["release"]) == ("infer", "0.9.2")
    assert not step["newest"] and not step["persists"]  # 0.9.2 is not the sweep's newest
