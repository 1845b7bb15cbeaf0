"""One framework's GPU predictor run for a cell and a card, under the interpreter that has what
it needs, and its answer as a Prediction (stored with the commit that made it)."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from membench import file_rules
from membench.gpu_predict.cards import Card, xla_target_config
from membench.paths import REPO_ROOT
from membench.records import write_json_atomic

PREDICT_VENV = REPO_ROOT / ".venv-predict"  # scripts/install.sh --predict
PREDICT_PYTHON_ENV = "MEMBENCH_PREDICT_PYTHON"
STANDARD_PRESET = "gpu-quick"  # ResNet-50 at 224x224, the U-Net at 128^3, GPT-2 small at 1024
TIMEOUT = 1800.0  # seconds for one predictor process (a capacity search traces several times)
METHODS = {
    "torch": "traced: the step under torch's fake tensors on the CPU device, CUDA's autocast "
    "policy and foreach optimizers, the CUDA caching allocator replayed",
    "jax": "compiled: the step compiled by XLA's GPU compiler for the card's target, its "
    "buffer assignment read",
}


class PredictionUnavailable(RuntimeError):
    """No predictor can run here for this framework (the message says what would fix it)."""


@dataclass
class Prediction:
    cell: dict[str, Any]
    card: str
    limit_bytes: int | None
    status: str  # ok, unsupported, error
    reason: str = ""
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None  # None where the framework keeps no reserve
    seconds: float | None = None
    method: str = ""
    framework_version: str = ""
    predicted_by: dict[str, object] = field(default_factory=dict)  # the commit
    predicted_at: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    # the GPU records of its cell when it was made (paths under results/): what it is held to
    records: list[str] = field(default_factory=list)
    # made before any GPU record of its cell existed, and kept as it was once one arrived:
    # an out-of-sample test, never remade (its records are attached to it)
    ahead: bool = False

    @property
    def key(self) -> str:
        return prediction_key(self.cell, self.limit_bytes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Prediction:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def predictor(framework: str) -> tuple[str, str]:
    """The framework's predictor module and the interpreter that runs it, or
    PredictionUnavailable saying why there is none."""
    from membench import registry
    from membench.interpreters import framework_python

    backend = type(registry.load_backend(framework))
    module = backend.gpu_prediction_module
    if module is None:
        raise PredictionUnavailable(
            f"{framework} has no way to predict GPU memory without a GPU (its memory is only "
            "known from a GPU run; the spec-only model's estimate is unvalidated)"
        )
    if backend.gpu_prediction_environment == "default":
        return module, framework_python(framework)
    from membench import settings

    chosen = settings.value(PREDICT_PYTHON_ENV)  # checked: runs Python 3 (SettingError)
    python = str(chosen or PREDICT_VENV / "bin" / "python")
    if not os.access(python, os.X_OK):
        raise PredictionUnavailable(
            f"{framework}'s GPU prediction needs its CUDA build's compiler (no GPU needed): "
            f"`bash scripts/install.sh --predict` makes {PREDICT_VENV.name}/ "
            f"(requirements/predict.txt), or set {PREDICT_PYTHON_ENV}"
        )
    return module, python


def prediction_key(cell: dict[str, Any], limit_bytes: int | None) -> str:
    """A stored prediction's name: its cell's key, its preset where its sizes are not the
    standard ones, and the limit it was asked under."""
    from membench.records import Cell

    key = Cell.from_dict(cell).key
    if cell.get("preset", STANDARD_PRESET) != STANDARD_PRESET:
        key = f"{key}--{cell['preset']}"
    return key if limit_bytes is None else f"{key}--limit{limit_bytes >> 20}mib"


def jax_limit(c: Card) -> int:
    """XLA's allocator limit on the card as the suite's GPU cells set it (MEM_FRACTION)."""
    from membench.backends.jax_backend import MEM_FRACTION

    return int(c.memory_bytes * MEM_FRACTION)


def request_for(cell: dict[str, Any], c: Card, limit_bytes: int | None) -> dict[str, Any]:
    """What a predictor is asked: the cell, the card as its framework needs it, the limit."""
    xla_memory = limit_bytes
    if xla_memory is None and cell["framework"] == "jax":  # the suite's GPU cells' limit
        xla_memory = jax_limit(c)
    return {
        "cell": cell,
        "card": {**c.to_dict(), "xla_target_config": xla_target_config(c, xla_memory)},
        "limit_bytes": limit_bytes,
    }


def run_predictor(framework: str, request: dict[str, Any], timeout: float = TIMEOUT) -> dict:
    """The predictor's one JSON line for a request (status ok, unsupported or error); raises
    KeyboardInterrupt where the predictions were stopped (stop_predictors)."""
    module, python = predictor(framework)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    with _LOCK:
        if _STOPPED.is_set():
            raise KeyboardInterrupt("the predictions were stopped")
        proc = subprocess.Popen(
            [python, "-W", "ignore", "-m", module, json.dumps(request, sort_keys=True)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT,
            start_new_session=True,  # ended by stop_predictors, not by a terminal's signal
        )  # fmt: skip
        _RUNNING.add(proc)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        proc.communicate()
        return {"status": "error", "reason": f"the predictor took over {timeout:.0f} s"}
    except BaseException:
        _kill(proc)
        raise
    finally:
        with _LOCK:
            _RUNNING.discard(proc)
    if _STOPPED.is_set():
        raise KeyboardInterrupt("the predictions were stopped")
    lines = stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (stderr or stdout).strip()[-500:]
        return {"status": "error", "reason": f"the predictor printed no answer: {tail}"}


# Predictor processes in flight, whichever thread waits on them (a card table's rows at once)
_RUNNING: set[subprocess.Popen] = set()
_LOCK = threading.Lock()
_STOPPED = threading.Event()


def stop_predictors() -> None:
    """End every predictor in flight; one asked for afterwards raises KeyboardInterrupt."""
    with _LOCK:
        _STOPPED.set()
        for proc in _RUNNING:
            _kill(proc)


def allow_predictors() -> None:
    """Predictors may start again (after stop_predictors)."""
    _STOPPED.clear()


def _kill(proc: subprocess.Popen) -> None:
    """The predictor and what it started (XLA's ptxas): its session's process group, while
    the predictor is not yet reaped (its pid, the group's, is still its own)."""
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def predict(cell: dict[str, Any], c: Card, limit_bytes: int | None = None) -> Prediction:
    """The cell's GPU memory on the card (under the allocator limit, where given)."""
    from membench.environment import git_commit

    framework = cell["framework"]
    made = Prediction(
        cell=cell, card=c.name, limit_bytes=limit_bytes, status="error",
        method=METHODS.get(framework, ""), predicted_by=git_commit(),
        predicted_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )  # fmt: skip
    try:
        answer = run_predictor(framework, request_for(cell, c, limit_bytes))
    except PredictionUnavailable as exc:
        made.status, made.reason = "unsupported", str(exc)
        return made
    made.status = answer.pop("status")
    made.reason = answer.pop("reason", "")
    made.allocated_bytes = answer.pop("allocated_bytes", None)
    made.reserved_bytes = answer.pop("reserved_bytes", None)
    made.seconds = answer.pop("seconds", None)
    made.framework_version = answer.pop("framework_version", "")
    made.details = answer
    return made


def save(prediction: Prediction, path: Path) -> None:
    """Write a prediction (a reader never meets half a file)."""
    write_json_atomic(path, prediction.to_dict())


def load(path: Path) -> Prediction:
    return Prediction.from_dict(file_rules.load_json(path))
