"""The memory model's calibrated constants: fitted from calibration cells, stored as data.

A calibration belongs to one machine and one framework version. Per workload and strategy it
holds the two constants of membench.memory.memory_model, fitted by least squares over the
calibration cells (the `calibrate` preset's cells of that strategy, measured by the ordinary
runner and worker): each cell's measured peak less the spec's state and input batch is
`runtime_bytes + activation_factor x the spec's activations`. On a host each strategy has two
fits: one on the measured steps' peak (MEASURED, which records' predictions are judged
against) and one on the whole-life peak (LIFE_METRIC: start-up, build, the first step with
its compiles, the measured steps; the layer a capacity budget holds, so the capacity guess
uses it: Jittor's forked compilers held 54-243 MiB above its steps' peak in the 128x128
calibration cells). A strategy the preset does not
calibrate takes its mode's reference fit (MODE_REFERENCE: the baseline's for training, plain
inference's for inference), as does every strategy of a calibration stored before fits were
per strategy (its fits name a mode only). Every cell behind a fit is
kept with its measured peak, so a fit can be checked by hand. The worker and `membench
predict` (membench.memory.predictions) predict with it; `analysis` reads their predictions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from membench import file_rules, paths
from membench.fitting import linear_fit
from membench.memory.memory_model import MEASURED, SPEC_ONLY, Constants, predict
from membench.metrics import LIFE_METRIC
from membench.records import Record, write_json_atomic
from membench.registry import CALIBRATION_PRESET, strategy

# 3: a host's fits of the whole-life peak beside the measured steps' (a `layer` field); 2: fits
# per strategy (a `strategy` field); 1: per mode (its fits serve every strategy of their mode)
FORMAT = 3
READS = (1, 2, 3)
# the fit a mode's other strategies fall back on
MODE_REFERENCE = {"train": "baseline", "infer": "infer"}


def mode_of(strategy_name: str) -> str:
    return strategy(strategy_name).mode


@dataclass(frozen=True)
class Point:
    """One calibration cell: what ran and its measured peak."""

    key: str
    strategy: str
    batch_size: int
    inputs: dict[str, int]
    measured_bytes: float


@dataclass(frozen=True)
class Fit:
    workload: str
    mode: str
    runtime_bytes: float
    activation_factor: float
    r2: float
    points: tuple[Point, ...]
    strategy: str = ""  # the strategy its cells ran; "" in a calibration fitted per mode
    layer: str = ""  # the peak fitted (a metric); "": the device's MEASURED (older files)

    @property
    def constants(self) -> Constants:
        return Constants(self.runtime_bytes, self.activation_factor)


@dataclass
class Calibration:
    """One framework version's constants on one machine, with where they came from."""

    machine: str
    framework: str
    framework_version: str
    device_kind: str  # cpu or gpu: which layer the constants describe (MEASURED)
    commit: str
    dirty: bool
    created_at: str
    records: str  # the calibration cells' store
    fits: list[Fit] = field(default_factory=list)

    def layer_of(self, f: Fit) -> str:
        return f.layer or MEASURED[self.device_kind]

    def fit(self, workload: str, strategy_name: str, layer: str | None = None) -> Fit | None:
        """The strategy's own fit of the layer (default: MEASURED), else its mode's reference
        fit (or an older calibration's fit of the whole mode)."""
        mode, wanted = mode_of(strategy_name), layer or MEASURED[self.device_kind]
        for names in ((strategy_name,), (MODE_REFERENCE[mode], "")):
            for f in self.fits:
                if f.workload == workload and f.mode == mode and f.strategy in names:
                    if self.layer_of(f) == wanted:
                        return f
        return None

    def constants(
        self, workload: str, strategy_name: str, layer: str | None = None
    ) -> Constants | None:
        found = self.fit(workload, strategy_name, layer)
        return found.constants if found else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["format"] = FORMAT
        out["measured_metric"] = MEASURED[self.device_kind]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        if data.get("format") not in READS:
            raise ValueError(f"calibration format {data.get('format')!r}, expected one of {READS}")
        fits = [
            Fit(**{**f, "points": tuple(Point(**p) for p in f["points"])}) for f in data["fits"]
        ]
        names = {k: data[k] for k in cls.__dataclass_fields__ if k != "fits"}
        return cls(**names, fits=fits)


def fit(workload: str, strategy_name: str, points: list[Point], layer: str = "") -> Fit | None:
    """The constants of one workload and strategy (fitted on the points' peaks of the layer);
    None with fewer than two batch sizes."""
    if len({p.batch_size for p in points}) < 2:
        return None
    x, y = [], []
    for p in points:
        spec = predict(workload, strategy(p.strategy), p.batch_size, p.inputs, SPEC_ONLY)
        if spec is None:
            return None
        x.append(spec.activations)
        y.append(p.measured_bytes - (spec.total - spec.activations))
    runtime, factor, r2 = linear_fit(x, y)
    mode = mode_of(strategy_name)
    return Fit(workload, mode, runtime, factor, r2, tuple(points), strategy_name, layer)


def point_of(record: Record, device_kind: str, layer: str | None = None) -> Point | None:
    """A calibration cell's point on the layer (default: MEASURED), or None if it did not end
    ok or lacks that peak."""
    measured = record.metrics.get(layer or MEASURED[device_kind])
    inputs = record.environment.get("workload_inputs")
    if record.status != "ok" or not measured or inputs is None:
        return None
    c = record.cell
    return Point(c.key, c.strategy, c.batch_size, dict(inputs), float(measured))


def calibrate(records: list[Record], device_kind: str, provenance: dict[str, Any]) -> Calibration:
    """One framework version's calibration from its calibration cells' records."""
    if any(r.cell.preset != CALIBRATION_PRESET for r in records):
        raise ValueError(f"only {CALIBRATION_PRESET} cells calibrate the memory model")
    framework = {r.cell.framework for r in records}
    versions = {r.environment.get("framework_version") for r in records if r.status == "ok"}
    if len(framework) != 1 or len(versions) != 1:
        raise ValueError(f"one framework version per calibration: {framework} {versions}")
    cal = Calibration(
        framework=framework.pop(), framework_version=str(versions.pop()),
        device_kind=device_kind, **provenance,
    )  # fmt: skip
    # a host's whole-life peak has fits of its own (a GPU's allocator peak has no such layer)
    layers = [MEASURED[device_kind], *([LIFE_METRIC] if device_kind == "cpu" else [])]
    for layer in layers:
        groups: dict[tuple[str, str], list[Point]] = {}
        for r in records:
            if point := point_of(r, device_kind, layer):
                groups.setdefault((r.cell.workload, r.cell.strategy), []).append(point)
        named = "" if layer == MEASURED[device_kind] else layer
        for (workload, strategy_name), points in sorted(groups.items()):
            if found := fit(workload, strategy_name, points, named):
                cal.fits.append(found)
    return cal


def save(cal: Calibration, results: Path | None = None) -> Path:
    path = paths.calibration_file(cal.machine, cal.framework, cal.framework_version, results)
    write_json_atomic(path, cal.to_dict())
    return path


def load(path: Path) -> Calibration:
    return Calibration.from_dict(file_rules.load_json(path))


def load_all(results: Path | None = None) -> dict[tuple[str, str, str], Calibration]:
    """Every stored calibration by (machine, framework, framework version)."""
    found = {}
    for path in paths.calibration_files(results):
        cal = load(path)
        found[(cal.machine, cal.framework, cal.framework_version)] = cal
    return found


def find(
    machine: str, framework: str, version: str, results: Path | None = None
) -> Calibration | None:
    path = paths.calibration_file(machine, framework, version, results)
    return load(path) if path.exists() else None
