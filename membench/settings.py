"""Every MEMBENCH_ environment variable, in one table: what it sets, how its value is read
(a parser of membench.argtypes, the same as a flag's) and who reads it. The command line
checks every one that is set before any work (check: one line, exit 2), as it checks its
flags; the code reads their values through value(), never from os.environ (the variables
read below the table, by the registry and the interpreters, through their own declarations:
membench.env_var). docs/methodology.md prints the table (markdown()); a test holds the code to
it.

Light to import: workers under a framework's own interpreter read their settings here too.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from typing import Any

from membench import argtypes, registry
from membench.env_var import Setting, SettingError
from membench.interpreters import ENV_PREFIX as PYTHON_PREFIX
from membench.interpreters import PYTHON
from membench.registry.plugins import PLUGINS
from membench.registry.presets import SELFCHECK_IMAGE_SIZE_SETTING

# SettingError and Setting: membench.env_var's, named here too for the table's readers
__all__ = ["PYTHON", "SETTINGS", "Setting", "SettingError", "check", "markdown", "setting", "value"]


def _preset(text: str) -> str:
    try:
        return registry.preset(text.strip()).name
    except registry.UnknownNameError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _release(text: str) -> object:
    from membench.stacks import VersionsFileError, parse_stack

    try:
        return parse_stack(text)
    except (VersionsFileError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _probe_budget(text: str) -> object:
    from membench.records import PROBE_BUDGET_ENV, ProbeBudget

    try:
        return ProbeBudget.of_env({PROBE_BUDGET_ENV: text})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            'not a probe budget ({"bytes": ..., "device_bytes": ...}, set by membench '
            f"capacity): {exc.__cause__ or exc}"
        ) from None


def _set_by_membench(flag: str) -> Callable[[str], Any]:
    def refuse(text: str) -> Any:
        raise argparse.ArgumentTypeError(
            f"set by membench for its workers from {flag}, never by hand: give {flag} instead"
        )

    return refuse


SETTINGS: tuple[Setting, ...] = (
    Setting("MEMBENCH_MACHINE", argtypes.machine, "machine name",
            "the machine's name (default: this host's kind)", "membench/environment.py"),
    Setting("MEMBENCH_PRESET", _preset, "preset", "the preset when -p is not given",
            "membench/environment.py"),
    Setting("MEMBENCH_MEMORY_CAP", argtypes.memory_cap_bytes, "size (8GiB)",
            "--memory-cap when it is not given", "membench/commands/run_options.py"),
    Setting("MEMBENCH_PROBE_BUDGET", _probe_budget, "JSON: bytes, device_bytes",
            "a capacity probe's budget (set by capacity for its probes)", "membench/records.py"),
    Setting("MEMBENCH_SIDE_BY_SIDE", argtypes.positive_int, "count",
            "workers launched at once on one device (set by capacity --side-by-side for its "
            "probes; their speed is not an answer's)", "membench/metrics.py"),
    Setting("MEMBENCH_PREDICT_PYTHON", argtypes.python_interpreter, "path to a Python 3",
            "the interpreter of JAX's GPU prediction (default .venv-predict/bin/python)",
            "membench/gpu_predict/run.py"),
    PLUGINS,
    Setting("MEMBENCH_ALLOW_BUSY", argtypes.switch, "1 or 0",
            "asv records a cell measured on a busy host, marked (bench --allow-busy)",
            "membench/publish/asv_suite.py"),
    Setting("MEMBENCH_STORE", argtypes.checked_path, "path",
            "the records asv's benchmarks read (set by bench)", "membench/publish/asv_suite.py"),
    Setting("MEMBENCH_CAPACITY_FILE", argtypes.checked_path, "path",
            "the capacity results asv records (set by capacity)",
            "membench/publish/asv_suite.py"),
    Setting("MEMBENCH_RECORDS_OF", argtypes.machine, "machine name",
            "the machine whose stored records asv records (set by bench)",
            "membench/publish/asv_suite.py"),
    Setting("MEMBENCH_STACK", _release, "release spec (jax==0.8.3)",
            "the framework release of an asv version environment",
            "membench/publish/asv_suite.py"),
    *(Setting(f"MEMBENCH_{what}", argtypes.names, "names, comma-separated",
              f"the {what.lower()} asv measures (set by bench)", "membench/publish/asv_suite.py")
      for what in ("WORKLOADS", "FRAMEWORKS", "STRATEGIES")),
    Setting("MEMBENCH_BATCH_SIZES", argtypes.batch_sizes, "batch sizes, comma-separated",
            "the batch sizes asv measures (set by bench)", "membench/publish/asv_suite.py"),
    Setting("MEMBENCH_WORLD_SIZE", argtypes.positive_int, "positive integer",
            "the ranks of a sharding cell asv measures (set by bench)",
            "membench/publish/asv_suite.py"),
    SELFCHECK_IMAGE_SIZE_SETTING,
    Setting("MEMBENCH_FORWARD_ENV", argtypes.names, "variable names, comma-separated",
            "more variables a Ray run hands its nodes", "membench/cells/engines/ray_engine.py"),
    Setting("MEMBENCH_TIMELINE", _set_by_membench("--timeline"), "(set by membench)",
            "set for a worker of a --timeline run (its record keeps it)",
            "membench/cells/worker_launch.py"),
    Setting("MEMBENCH_TRACE", _set_by_membench("--trace"), "(set by membench)",
            "set for a worker of a --trace run (its record keeps it)",
            "membench/cells/worker_launch.py"),
    # read by the shell scripts (their defaults are theirs), checked here all the same
    Setting("MEMBENCH_MEASURE_COMMIT", argtypes.revision, "git commit",
            "the bundled commit a GPU command measures from", "scripts/gpu_node.sh"),
    Setting("MEMBENCH_COMMAND_SECONDS", argtypes.positive_seconds, "seconds",
            "a GPU command's limit, less a margin (570)", "scripts/gpu_node.sh"),
    Setting("MEMBENCH_JITTOR_BUILD_SECONDS", argtypes.positive_seconds, "seconds",
            "time for Jittor's core to compile on a GPU machine (420)", "scripts/gpu_node.sh"),
    Setting("MEMBENCH_WHEELHOUSE", argtypes.checked_path, "path",
            "the wheels an offline install uses (.wheelhouse)", "scripts/install_offline.sh"),
    Setting("MEMBENCH_JITTOR_WHEELHOUSE", argtypes.checked_path, "path",
            "Jittor's wheels (.wheelhouse-jittor)", "scripts/install_offline.sh"),
    Setting("MEMBENCH_WHEELHOUSE_MIB", argtypes.positive_int, "positive integer",
            "the most the gathered wheels may weigh (60)", "scripts/gather_wheelhouse.sh"),
    Setting("MEMBENCH_REQUIREMENTS", argtypes.checked_path, "path",
            "the requirements install.sh installs (requirements/cpu.txt)", "scripts/install.sh"),
    Setting("MEMBENCH_JITTOR_REQUIREMENTS", argtypes.checked_path, "path",
            "Jittor's requirements, in an environment of its own", "scripts/install.sh"),
)  # fmt: skip
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting | None:
    if name.startswith(PYTHON_PREFIX):
        return PYTHON
    return BY_NAME.get(name)


def value(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The variable's value as its parser reads it; None where it is unset or empty.
    SettingError (one line) where the parser refuses it."""
    found = setting(name)
    if found is None:
        raise KeyError(f"{name} is not in membench.settings.SETTINGS")
    return found.value(environ, name)


def check(environ: Mapping[str, str] | None = None) -> None:
    """Every MEMBENCH_ variable that is set, read as the code will read it: SettingError at
    the first it cannot use (an unknown one is left alone: a plugin may read its own)."""
    environ = os.environ if environ is None else environ
    for name in sorted(environ):
        if name.startswith("MEMBENCH_") and setting(name) is not None:
            value(name, environ)


def markdown() -> str:
    """The table, as docs/methodology.md prints it."""
    rows = ["| variable | value | sets | where |", "|---|---|---|---|"]
    for s in (*SETTINGS, PYTHON):
        rows.append(f"| `{s.name}` | {s.kind} | {s.means} | `{s.read_by}` |")
    return "\n".join(rows) + "\n"
