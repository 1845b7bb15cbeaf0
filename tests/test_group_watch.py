"""The runner's watch over a worker's process group, on a fake /proc: the other processes'
highest summed proportional share, and the cap judged by PSS where RSS is over it."""

from pathlib import Path

from membench.instruments.memory_cap import PAGE, GroupWatch

MIB = 2**20


def process(proc: Path, pid: int, pgid: int, rss_mib: int, pss_mib: int) -> None:
    """A /proc/<pid> with a stat line (process group, RSS in pages) and a smaps_rollup."""
    entry = proc / str(pid)
    entry.mkdir(parents=True, exist_ok=True)
    after = ["S", "1", str(pgid), *["0"] * 18, str(rss_mib * MIB // PAGE)]
    (entry / "stat").write_text(f"{pid} (python) {' '.join(after)}\n")
    (entry / "smaps_rollup").write_text(f"Rss: {rss_mib * 1024} kB\nPss: {pss_mib * 1024} kB\n")


def test_the_others_peak_is_their_summed_share_and_the_cap_is_judged_by_it(tmp_path):
    proc = tmp_path / "proc"
    process(proc, 100, 100, rss_mib=500, pss_mib=450)  # the worker: not among the others
    process(proc, 101, 100, rss_mib=300, pss_mib=120)  # a forked compiler sharing pages
    process(proc, 102, 100, rss_mib=300, pss_mib=130)
    process(proc, 200, 200, rss_mib=900, pss_mib=900)  # another group
    watch = GroupWatch(100, proc)
    assert watch.over(2000 * MIB) is None and watch.others_peak == 250 * MIB
    # over the cap by RSS (1,100 MiB), not by the shares (700 MiB): not over
    assert watch.over(1000 * MIB) is None
    assert watch.over(600 * MIB) == 700 * MIB


def test_shares_are_read_only_where_the_others_rss_could_raise_their_peak(tmp_path):
    proc = tmp_path / "proc"
    process(proc, 100, 100, rss_mib=500, pss_mib=450)
    process(proc, 101, 100, rss_mib=400, pss_mib=300)
    watch = GroupWatch(100, proc)
    watch.over(2000 * MIB)
    assert watch.others_peak == 300 * MIB
    # RSS fell below the peak: its share cannot be above it, so it is not read (a share
    # written above the RSS here would show if it were)
    process(proc, 101, 100, rss_mib=250, pss_mib=350)
    watch.over(2000 * MIB)
    assert watch.others_peak == 300 * MIB
    process(proc, 101, 100, rss_mib=420, pss_mib=320)  # RSS above the peak: read again
    watch.over(2000 * MIB)
    assert watch.others_peak == 320 * MIB
