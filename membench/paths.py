"""Where results live: the one place that spells the layout under results/.

    results/records/<machine>/<preset>-<commit12>/            a preset's records (one per cell)
    results/records/<machine>/versions-<preset>-<commit12>/<version>/   the version sweep's
    results/records/<machine>/versions-<preset>-<commit12>/round-<n>/<version>/  its repeats
    results/capacity/<machine>/<preset>-<budget>mib-<commit12>/capacity.json and probes/
    results/capacity/<machine>/<preset>-<budget>mib-card-<commit12>/   a card's whole budget
    results/calibration/<machine>/<framework>-<version>.json  the memory model's constants
    results/calibration/<machine>/records-<commit12>/         the calibration cells' records
    results/calibration/<machine>/records-<commit12>-warm-up/ cells that warmed a compile cache
    results/selfcheck/<machine>/<workload>-<size>px-bs<batch>-<commit12>.json   membench selfcheck
    results/devices/<machine>/card.json          the GPU as its frameworks read it there
    results/predictions/<card>/                  GPU memory predicted on a CPU host
    results/asv/<machine>/                                    asv's own results
    results/asv/benchmarks.json                               asv's benchmark list
    docs/results/<machine>.md                                 the page generated from them

Framework-free, and free of the harness: both the harness and `analysis` use it. Functions
take the machine, preset and commit as arguments; the harness supplies its own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def results_of(repo: Path) -> Path:
    """A checkout's results folder."""
    return repo / "results"


RESULTS = results_of(REPO_ROOT)
# The results pages (membench report --docs): generated from results/, committed beside docs/.
DOCS_RESULTS = REPO_ROOT / "docs" / "results"
# The main job's HTML report (`membench bench` writes it last): never committed.
REPORT = REPO_ROOT / "report"
# Stores of `membench run` without --store: outside results/, never committed.
LOCAL_STORES = Path(".membench") / "records"

_RECORDS, _CAPACITY, _ASV = "records", "capacity", "asv"
_TIMELINES = "timelines"  # stores of cells measured with --timeline, kept apart from the tables
_CALIBRATION = "calibration"
_SELFCHECK = "selfcheck"
_PREDICTIONS = "predictions"  # GPU memory predicted on a CPU (membench gpu-predict), per card
_DEVICES = "devices"  # a GPU machine's card as its frameworks read it (gpu-predict --describe-card)
_VERSIONS_PREFIX = "versions-"
CAPACITY_FILE = "capacity.json"
PROBES = "probes"
LOGS = "logs"  # each store's worker logs


def _root(results: Path | None) -> Path:
    """The results folder: the given one, else this checkout's (read when called)."""
    return results if results is not None else RESULTS


def _short(commit: str) -> str:
    return str(commit)[:12]


def preset_store(machine: str, preset: str, commit: str, results: Path | None = None) -> Path:
    """A preset's records, measured by one commit on one machine."""
    return _root(results) / _RECORDS / machine / f"{preset}-{_short(commit)}"


def versions_store(machine: str, preset: str, commit: str, results: Path | None = None) -> Path:
    """The version matrix's records; one folder per framework version below it."""
    return _root(results) / _RECORDS / machine / f"{_VERSIONS_PREFIX}{preset}-{_short(commit)}"


def sweep_round(root: Path, number: int) -> Path:
    """Where a version sweep's repeat lands: round 1 in the sweep's folder itself (what asv
    records), round N in its round-N/ (the runs' range is each verdict's noise)."""
    return root if number == 1 else root / f"round-{number}"


def sweep_of(path: str | Path) -> str:
    """The version sweep a record file belongs to (its versions-<preset>-<commit12> folder),
    "" for a record of no sweep."""
    return next((part for part in Path(path).parts if part.startswith(_VERSIONS_PREFIX)), "")


def release_of(path: str | Path) -> str:
    """The release a version sweep's record file was measured under (the folder below its
    sweep's, a round-N/ passed over), "" for a record of no sweep."""
    parts = Path(path).parts
    sweep = sweep_of(path)
    if not sweep:
        return ""
    below = [p for p in parts[parts.index(sweep) + 1 : -1] if not p.startswith("round-")]
    return below[0] if below else ""


def timeline_store(machine: str, preset: str, commit: str, results: Path | None = None) -> Path:
    """Cells measured with their memory timelines (`membench run --timeline --store ...`) by
    one commit: apart from results/records, so that the tables keep one run's figures."""
    return timelines_root(results) / machine / f"{preset}-{_short(commit)}"


def timelines_root(results: Path | None = None) -> Path:
    return _root(results) / _TIMELINES


def warm_store(machine: str) -> Path:
    """The version sweep's scratch store (its cache warm-up cells: never a result)."""
    return LOCAL_STORES / machine / "warm-up"


def local_store(machine: str, preset: str) -> Path:
    return local_stores(machine) / preset


def local_stores(machine: str) -> Path:
    """Every local store of a machine (one per preset)."""
    return LOCAL_STORES / machine


def budget_mib(budget_bytes: float) -> int:
    """A budget as capacity runs are named by it (and asv's capacity classes take it): MiB."""
    return round(budget_bytes / 2**20)


def capacity_run(
    machine: str, preset: str, budget_bytes: float, commit: str, results: Path | None = None,
    whole_card: bool = False,
) -> Path:  # fmt: skip
    """One capacity run: its capacity.json and its probes' store (`-card`: a card's whole
    budget, NVML's process figure, apart from the allocator-limit runs of the same budget).
    The folder's name says the budget to people; code reads it from the results
    (budget_bytes, budget_layer) or the probes' records (membench.records.ProbeBudget), never
    from the name."""
    card = "-card" if whole_card else ""
    return (
        _root(results)
        / _CAPACITY
        / machine
        / f"{preset}-{budget_mib(budget_bytes)}mib{card}-{_short(commit)}"
    )


def capacity_files(
    results: Path | None = None,
    machine: str = "*",
    preset: str = "*",
    commit: str = "*",
    budget_mib: int | None = None,
    whole_card: bool = False,
) -> list[Path]:
    """capacity.json of every matching capacity run, in name order: the runs within an
    allocator limit, or with whole_card those of a card's whole budget (`-card`, which no
    page reads yet). A preset's runs are matched by name: with no budget, `cpu` also matches
    `cpu-capacity`'s (check the results' preset)."""
    budget = "*" if budget_mib is None else str(budget_mib)
    short = _short(commit) if commit != "*" else "*"
    card = "-card" if whole_card else ""
    pattern = f"{machine}/{preset}-{budget}mib{card}-{short}/{CAPACITY_FILE}"
    found = sorted((_root(results) / _CAPACITY).glob(pattern))
    return found if whole_card else [p for p in found if "mib-card-" not in p.parent.name]


def probe_stores(results: Path | None = None) -> list[Path]:
    return sorted((_root(results) / _CAPACITY).glob(f"*/*/{PROBES}"))


# Beside a capacity run's probes/: a boundary's k-th measurement (probes-repeat-<k>/), the
# cell that warms a disk compile cache before a search (probes-warm-up/) and the searches'
# first guesses, kept so that a resumed search does not compile them again (probes-guesses/).
def repeat_probes(probes: Path, repeat: int) -> Path:
    return probes.with_name(f"{probes.name}-repeat-{repeat}")


def warm_up_probes(probes: Path) -> Path:
    return probes.with_name(f"{probes.name}-warm-up")


def guess_file(probes: Path, workload: str, framework: str, strategy: str) -> Path:
    """Where one search's first guess is kept (membench.capacity.first_guess.search_guess)."""
    return probes.with_name(f"{probes.name}-guesses") / f"{workload}_{framework}_{strategy}.json"


def answer_stores(run: Path) -> list[Path]:
    """A capacity run's stores that hold its answers' measurements: probes/ and the repeats'."""
    return [run / PROBES, *sorted(run.glob(f"{PROBES}-repeat-*"))]


# The linked folders record_files has named on stderr (each once per process).
_linked_said: set[Path] = set()


def linked_folders(root: Path) -> list[Path]:
    """The folders below root (any depth) that are symbolic links: record_files does not
    follow them (a link may loop, or lead out of the results)."""
    found = []
    for folder, subfolders, _ in os.walk(root):
        found += [Path(folder, d) for d in subfolders if os.path.islink(os.path.join(folder, d))]
    return sorted(found)


def record_files(root: Path) -> Iterator[Path]:
    """Every record file below a records folder (any depth), logs left out. A folder that is
    a symbolic link is skipped, and said so on stderr (a reader would otherwise miss its
    records without a word)."""
    for link in linked_folders(root):
        if link not in _linked_said and LOGS not in link.relative_to(root).parts:
            _linked_said.add(link)
            print(
                f"membench: skipped {link}: a symbolic link to a folder (records are read "
                "from real folders only: copy them in, or read the folder it links to)",
                file=sys.stderr,
            )
    for path in sorted(root.rglob("*.json")):
        if LOGS not in path.relative_to(root).parts:
            yield path


def calibration_file(
    machine: str, framework: str, version: str, results: Path | None = None
) -> Path:
    """One framework version's calibrated memory-model constants on one machine."""
    return _root(results) / _CALIBRATION / machine / f"{framework}-{version}.json"


def calibration_files(results: Path | None = None) -> list[Path]:
    """Every stored calibration, every machine, in name order."""
    return sorted((_root(results) / _CALIBRATION).glob("*/*.json"))


def calibration_records(machine: str, commit: str, results: Path | None = None) -> Path:
    """The records of the calibration cells one commit measured on one machine."""
    return _root(results) / _CALIBRATION / machine / f"records-{_short(commit)}"


def selfcheck_file(
    machine: str, workload: str, image_size: int, batch: int, commit: str,
    results: Path | None = None,
) -> Path:  # fmt: skip
    """One fairness check (suite cells beside the frameworks' own loops) on one machine."""
    name = f"{workload}-{image_size}px-bs{batch}-{_short(commit)}.json"
    return _root(results) / _SELFCHECK / machine / name


def prediction_file(card: str, key: str, results: Path | None = None) -> Path:
    """One cell's GPU prediction for a card (key: the cell's, with its limit where it has one)."""
    return _root(results) / _PREDICTIONS / card / f"{key}.json"


def prediction_files(results: Path | None = None) -> list[Path]:
    """Every stored GPU prediction, of every card."""
    return sorted((_root(results) / _PREDICTIONS).glob("*/*--bs*.json"))


def card_tables_file(card: str, budget: float | None = None, results: Path | None = None) -> Path:
    """A card's predicted decision table (membench gpu-predict --table), for the whole card or
    within a capacity budget."""
    name = "capacity.json" if budget is None else f"capacity-{budget_mib(budget)}mib.json"
    return _root(results) / _PREDICTIONS / card / name


def card_tables_files(results: Path | None = None) -> list[Path]:
    return sorted((_root(results) / _PREDICTIONS).glob("*/capacity*.json"))


def selfcheck_files(results: Path | None = None) -> list[Path]:
    """Every stored fairness check, every machine, in name order."""
    return sorted((_root(results) / _SELFCHECK).glob("*/*.json"))


def records_root(results: Path | None = None) -> Path:
    return _root(results) / _RECORDS


def measured_roots(results: Path | None = None) -> list[Path]:
    """The folders whose records are measurements of cells: the stores and capacity probes."""
    return [_root(results) / _RECORDS, _root(results) / _CAPACITY]


def is_card_table(path: Path) -> bool:
    """A card's whole-card predicted table (card_tables_file without a budget)."""
    return path.name == CAPACITY_FILE


def asv_results(results: Path | None = None) -> Path:
    """asv's results_dir (benchmarks.json and one folder per machine)."""
    return _root(results) / _ASV


def asv_machine(machine: str, results: Path | None = None) -> Path:
    return asv_results(results) / machine


def asv_result_files(asv_root: Path) -> list[Path]:
    """asv's per-commit result files, every machine (machine.json left out)."""
    return [p for p in sorted(asv_root.glob("*/*.json")) if p.name != "machine.json"]


ASV_BENCHMARKS = "benchmarks.json"


# the folders under results/ that hold a folder per machine
_MACHINE_TOPS = (_RECORDS, _CAPACITY, _CALIBRATION, _ASV, _TIMELINES, _DEVICES, _SELFCHECK)


def device_description(machine: str, results: Path | None = None) -> Path:
    """A GPU machine's card as its frameworks read it there (gpu-predict --describe-card)."""
    return _root(results) / _DEVICES / machine / "card.json"


def machine_results(machine: str, results: Path | None = None, own: bool = False) -> list[Path]:
    """Everything one machine's runs wrote under results/ (records, capacity, asv), with asv's
    shared benchmark list unless own; only what exists."""
    root = _root(results)
    found = [root / top / machine for top in _MACHINE_TOPS]
    if not own:
        found.append(root / _ASV / ASV_BENCHMARKS)
    return [p for p in found if p.exists()]


def result_machines(results: Path | None = None) -> list[str]:
    """The machines with results under results/."""
    root = _root(results)
    return sorted({p.name for top in _MACHINE_TOPS if (root / top).is_dir()
                   for p in (root / top).iterdir() if p.is_dir()})  # fmt: skip


def is_machine_result(relative: Path | str, machine: str) -> bool:
    """Whether a path relative to results/ lies inside a machine's results (or is asv's
    benchmark list)."""
    parts = Path(relative).parts
    if ".." in parts:
        return False
    if parts == (_ASV, ASV_BENCHMARKS):
        return True
    return len(parts) >= 2 and parts[0] in _MACHINE_TOPS and parts[1] == machine


def results_page(machine: str, docs_results: Path | None = None) -> Path:
    """A machine's generated results page."""
    return (docs_results if docs_results is not None else DOCS_RESULTS) / f"{machine}.md"


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("-", "_").split("_"))


# A preset is part of an asv benchmark's name: <Workload>_<preset>, hyphens as underscores
# (Resnet50_cpu, Transformer_cpu_shard, Resnet50Capacity_cpu_capacity), so that asv never sets one
# preset's figures against another's and `--bench _<preset>\.` selects one preset.
ASV_CAPACITY = "Capacity"


def asv_preset_ident(preset: str) -> str:
    return preset.replace("-", "_")


def asv_class_name(workload: str, preset: str, capacity: bool = False) -> str:
    """The asv class of a workload under a preset: (resnet50, cpu-shard) -> Resnet50_cpu_shard;
    its capacity class, where the preset declares budgets, Resnet50Capacity_cpu_shard."""
    return f"{_camel(workload)}{ASV_CAPACITY if capacity else ''}_{asv_preset_ident(preset)}"


def asv_class_cell(name: str, workloads: Iterable[str] = ()) -> tuple[str, str]:
    """(workload, preset) of a measuring class's name, the inverse of asv_class_name (preset
    names have no underscores): the workload among those given whose class name it is, else
    the name in lower case; preset "" for a class named before presets were part of it."""
    camel, _, ident = name.partition("_")
    workload = next((w for w in workloads if _camel(w) == camel), camel.lower())
    return workload, ident.replace("_", "-")
