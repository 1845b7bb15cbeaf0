"""The same capacity search on other host kinds: whether an answer carries from one CPU to
another. A host's memory is the framework's and the OS's more than the CPU's, but kernels,
thread pools and a JIT's compiled code differ between CPUs, so a reader's machine may fit
another batch. Each answer of one machine stands beside the same search (workload, preset,
budget, its layer, framework, strategy) on every other machine, with the largest batch that
fitted every run on each (the top of the answer's noise band: analysis.loader's
fitted_every_run)."""

from __future__ import annotations

import pandas as pd

from analysis.decision_terms import budget_label, latest_searches

KEYS = ["workload", "preset", "budget_gib", "budget_layer", "framework", "strategy"]
COLUMNS = [
    "workload", "preset", "budget", "framework", "strategy", "largest batch here",
    "every run fitted here", "on", "largest batch there", "every run fitted there",
    "difference %", "bands overlap",
]  # fmt: skip
TITLE = "The same searches on other host kinds: does an answer carry to another CPU?"


def _answers(capacity: pd.DataFrame) -> pd.DataFrame:
    """The latest bracketed answers (ok, above 0, below the search's maximum)."""
    searches = latest_searches(capacity)
    ok = (searches["status"] == "ok") & (searches["largest_batch"] > 0)
    return searches[ok & searches["smallest_non_fit"].notna()]


def across_hosts(capacity: pd.DataFrame, machine: str) -> pd.DataFrame:
    """Each of the machine's answers with the same search's answer on every other machine,
    the difference in % of this one's, and whether their bands (the answer up to the largest
    batch that fitted every run) overlap; empty where no search was made on two machines."""
    if capacity.empty or "fitted_every_run" not in capacity.columns:
        return pd.DataFrame(columns=COLUMNS)
    answers = _answers(capacity)
    mine = answers[answers["machine"] == machine]
    theirs = answers[answers["machine"] != machine]
    both = mine.merge(theirs, on=KEYS, suffixes=("", "_there"))
    rows = []
    for r in both.sort_values([*KEYS, "machine_there"]).itertuples():
        here, there = int(r.largest_batch), int(r.largest_batch_there)
        top, top_there = int(r.fitted_every_run), int(r.fitted_every_run_there)
        rows.append([
            r.workload, r.preset, budget_label(r.budget_gib), r.framework, r.strategy, here,
            top, r.machine_there, there, top_there, (there - here) / here * 100,
            "yes" if max(here, there) <= min(top, top_there) else "no",
        ])  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS).round(1)


def carried(table: pd.DataFrame) -> str:
    """One sentence over across_hosts' rows: how many answers are the same, how many bands
    overlap, and the largest difference."""
    if table.empty:
        return ""
    same = int((table["largest batch here"] == table["largest batch there"]).sum())
    overlap = int((table["bands overlap"] == "yes").sum())
    worst = table.loc[table["difference %"].abs().idxmax()]
    return (
        f"{len(table)} searches made on both: {same} with the same answer, {overlap} whose "
        f"bands overlap; the largest difference {worst['difference %']:+.1f}% "
        f"({worst['framework']} {worst['strategy']}, {worst['workload']} within "
        f"{worst['budget']}: {worst['largest batch here']} here, "
        f"{worst['largest batch there']} on {worst['on']})."
    )
