"""A capacity search's first guess: the memory model's (membench.memory.memory_model, with this
machine's calibrated constants where they exist for the current protocol and installed
version) or, on a host, the framework's compiler's where it offers a prediction
(membench.capacity.compiled_guess); a guess once made is kept beside the search's results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from membench import file_rules, registry
from membench.capacity.compiled_guess import (
    CompiledGuessFailed,
    compiled_guess,
    compiled_memory_module,
)
from membench.capacity.search_steps import MAX_BATCH, Budget
from membench.memory import calibration
from membench.memory.calibration import MODE_REFERENCE, Calibration, Fit
from membench.memory.memory_model import MEASURED, SPEC_ONLY, Constants, predict
from membench.metrics import (
    LIFE_METRIC,
    STEADY_METRIC,
)
from membench.records import (
    write_json_atomic,
)


@dataclass(frozen=True)
class Guess:
    """The memory model's largest batch within a budget, and the slope the search steps by."""

    batch: int  # 0: not even one step fits, by the model
    bytes_per_sample: float
    # "calibrated (<framework> <version>)", "calibrated on <host kind> (...)" (another host
    # kind's constants), either ending ", <strategy>'s constants)" where another strategy's
    # fit stood in (calibration_basis), "spec-only" or the compiler's
    basis: str
    fixed_bytes: float = 0.0  # the predicted peak less its per-sample part
    # batches measured to make the guess (the compiler's first-run extra; the calibration
    # cells behind the model's constants): a search whose answer or next batch is one of
    # them is left out of the guess's error (a prediction never scored against its own input)
    measured_batches: tuple[int, ...] = ()


def calibrated_layer(layer: str) -> str:
    """The metric a calibration of the budget's layer was measured on: a host budget's
    whole-life peak by a host calibration (fitted on the whole-life peaks of its cells too:
    budget_fit)."""
    return STEADY_METRIC if layer == LIFE_METRIC else layer


def budget_fit(cal: Calibration, workload: str, strategy: str, layer: str) -> Fit | None:
    """The calibration's fit for the budget's layer: its fit of that layer where it has one,
    else its fit of the layer it measured (a host calibration stored before it fitted the
    whole-life peak)."""
    return cal.fit(workload, strategy, layer) or cal.fit(workload, strategy)


def calibration_for(
    machine: str, framework: str, layer: str, workload: str, strategy: str,
    calibrations: Mapping[tuple[str, str, str], Calibration] | None = None,
    version: str | None = None,
) -> Calibration | None:  # fmt: skip
    """The framework's calibration of the workload's strategy (its own fit, else its mode's:
    Calibration.fit) for the budget's layer, measured at the calibrate preset's batches (an
    older protocol's fit is not used: the U-Net's at 1 and 3 was noise): this machine's where
    it has one, else, on a host, another host kind's (a framework's memory on a host differs
    little between CPU models: intel-xeon's constants guessed ba136c8's torch answers on
    amd-epyc-f26m2 with a 25% median error, the spec alone with 144%); of those, the installed
    version's (or the given version's) where it is known and stored, else the newest.
    calibrations: the stored ones (calibration.load_all) unless given."""
    stored = calibration.load_all() if calibrations is None else calibrations
    found = [
        c for (_, f, _), c in stored.items()
        if f == framework and MEASURED[c.device_kind] == calibrated_layer(layer)
        and current_protocol(c, workload, strategy)
    ]  # fmt: skip
    here = [c for c in found if c.machine == machine]
    found = here or [c for c in found if c.device_kind == "cpu"]
    wanted = version or installed_version(framework)
    exact = [c for c in found if c.framework_version == wanted]
    return max(exact or found, key=lambda c: c.created_at, default=None)


def current_protocol(cal: Calibration, workload: str, strategy: str) -> bool:
    """Whether the fit the calibration holds for the workload's strategy was measured at the
    calibrate preset's inputs and batches for the strategy whose fit it is (ResNet-50's fits
    at 128x128 do not carry to the searches' 224x224)."""
    fit = cal.fit(workload, strategy)
    sizes = registry.preset(registry.CALIBRATION_PRESET).sizes
    if fit is None or workload not in sizes:
        return False
    wanted = registry.calibration_batches(workload, fit.strategy)
    inputs = dict(sizes[workload].inputs)
    return sorted({p.batch_size for p in fit.points}) == sorted(wanted) and all(
        p.inputs == inputs for p in fit.points
    )


def calibration_basis(cal: Calibration, machine: str, workload: str, strategy: str) -> str:
    """The guess's basis as records and tables name it: whose calibration it used, and the
    strategy whose fit stood in where the strategy has none of its own."""
    where = "" if cal.machine == machine else f" on {cal.machine}"
    fit = cal.fit(workload, strategy)
    source = (fit.strategy or MODE_REFERENCE[fit.mode]) if fit else strategy
    borrowed = f", {source}'s constants" if source != strategy else ""
    return f"calibrated{where} ({cal.framework} {cal.framework_version}{borrowed})"


def installed_version(framework: str) -> str | None:
    """The framework distribution's version in this interpreter, without importing it."""
    try:
        return metadata.version(registry.framework(framework).distribution)
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class Ran:
    """What a stored search ran, from its records (a guess made again later uses them, not
    today's preset sizes nor the installed framework version)."""

    inputs: dict[str, int]
    framework_version: str


def model_guess(
    workload: str, framework: str, strategy: str, preset: str, budget: Budget, machine: str,
    max_batch: int = MAX_BATCH,
    calibrations: Mapping[tuple[str, str, str], Calibration] | None = None,
    ran: Ran | None = None,
) -> Guess | None:  # fmt: skip
    """The largest multiple of the strategy's micro-batch count whose predicted peak stays
    within the budget (the model is linear in the batch), or None where the workload has no
    memory model. Calibrated constants where this machine (else another host kind) has them
    for the workload's strategy on the budget's layer; nothing measured by this search enters
    it. ran: a stored search's inputs and framework version (default: the preset's and the
    installed one)."""
    knobs = registry.strategy(strategy)
    inputs = ran.inputs if ran else registry.preset(preset).size(workload).inputs
    world = registry.world_size_of(knobs, registry.preset(preset))
    version = ran.framework_version if ran else None
    cal = calibration_for(
        machine, framework, budget.layer, workload, strategy, calibrations, version
    )
    fit = budget_fit(cal, workload, strategy, budget.layer) if cal else None
    constants = fit.constants if fit else None
    basis = calibration_basis(cal, machine, workload, strategy) if constants else "spec-only"
    # the cells measured for this very guess: the strategy's own fit, on this machine (a fit
    # standing in, the reference strategy's or another host kind's, measured other cells)
    own = fit is not None and fit.strategy == strategy and cal.machine == machine
    measured = tuple(sorted({p.batch_size for p in fit.points})) if own else ()
    if constants and constants.activation_factor <= 0:
        # a two-point fit on the noise of tiny batches (the U-Net's inference on CPU): a slope
        # that says nothing, so the spec's activations stand in for it (the runtime stays)
        constants = Constants(constants.runtime_bytes, SPEC_ONLY.activation_factor)
        basis += ", spec activations (calibrated factor not positive)"
    step = knobs.accumulate

    def peak(batch: int) -> float | None:
        found = predict(workload, knobs, batch, inputs, constants or SPEC_ONLY, world)
        return found.total if found is not None else None

    one, two = peak(step), peak(2 * step)
    if one is None or two is None:
        return None
    per_sample = (two - one) / step
    fixed = one - per_sample * step
    if one > budget.bytes or per_sample <= 0:
        return Guess(0, per_sample, basis, fixed, measured)
    batch = step + int((budget.bytes - one) // per_sample) // step * step
    return Guess(min(batch, max_batch // step * step), per_sample, basis, fixed, measured)


def model_fields(
    workload: str, framework: str, strategy: str, preset: str, budget: Budget, machine: str,
    calibrations: Mapping[tuple[str, str, str], Calibration] | None = None,
    ran: Ran | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A search's model_batch and model_basis: the model's guess, kept beside the answer even
    where the compiler's guided the search, and never capped by the search's largest batch
    (a capped guess would hide how far above the answer the model was)."""
    found = model_guess(
        workload, framework, strategy, preset, budget, machine, MAX_BATCH, calibrations, ran
    )
    return {
        "model_batch": found.batch if found else None,
        "model_basis": found.basis if found else "",
    }


def makes_compiled_guess(budget: Budget, framework: str) -> bool:
    """Whether a search's first guess comes from the framework's compiler: a whole-life host
    budget (what the compiled guess predicts) and a framework that offers one."""
    return budget.layer == LIFE_METRIC and compiled_memory_module(framework) is not None


def search_guess(
    workload: str, framework: str, strategy: str, preset: str, budget: Budget, machine: str,
    max_batch: int = MAX_BATCH, kept: Path | None = None,
) -> Guess | None:  # fmt: skip
    """The search's first guess: on a host budget (the whole-life peak), from the framework's
    own compiler where it offers one (JAX: the step compiled, not run, in processes of its
    own: membench.capacity.compiled_guess), else the memory model's (model_guess), which also stands
    in, with the reason, where the compiles fail. A compiled guess is kept in the file
    `kept` and read back from it for the same search (a resumed one compiles nothing)."""
    found = model_guess(workload, framework, strategy, preset, budget, machine, max_batch)
    if not makes_compiled_guess(budget, framework):
        return found
    question = {"budget_bytes": budget.bytes, "max_batch": max_batch}
    if kept is not None and (old := _kept_guess(kept, question)) is not None:
        return old
    step = registry.strategy(strategy).accumulate
    try:
        xla = compiled_guess(workload, framework, strategy, preset, budget.bytes, max_batch, step)
    except CompiledGuessFailed as exc:
        if found is None:
            return None
        why = f"{found.basis} (the compiled guess failed: {str(exc)[:200]})"
        return Guess(
            found.batch, found.bytes_per_sample, why, found.fixed_bytes, found.measured_batches
        )
    if xla is None:
        return found
    guess = Guess(xla.batch, xla.bytes_per_sample, xla.basis, xla.fixed_bytes, xla.measured_batches)
    if kept is not None:
        write_json_atomic(kept, {**question, "guess": asdict(guess)})  # no link followed
    return guess


def _kept_guess(path: Path, question: dict[str, float]) -> Guess | None:
    """A guess kept by an earlier run of the same search, or None (none, another question,
    or a file that cannot be read: the guess is then made again)."""
    try:
        data = file_rules.load_json(path)
        if {k: data[k] for k in question} != question:
            return None
        raw = data["guess"]
        return Guess(
            int(raw["batch"]), float(raw["bytes_per_sample"]), str(raw["basis"]),
            float(raw["fixed_bytes"]), tuple(int(b) for b in raw["measured_batches"]),
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return None
