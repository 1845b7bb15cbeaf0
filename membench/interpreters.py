"""Which Python runs each framework's workers.

One environment cannot always hold every framework: Jittor 1.3.11 needs numpy < 2 while jax
0.7.2 and later need numpy >= 2 (a GPU image's jax 0.11 among them). A framework may then live
in an interpreter of its own, named by MEMBENCH_PYTHON_<FRAMEWORK> (e.g.
MEMBENCH_PYTHON_JITTOR=/opt/jittor-env/bin/python), or by an environment at .venv-<framework>/
in the checkout (what `scripts/install.sh --gpu` and scripts/install_offline.sh make for
Jittor); the runner starts that framework's workers with it. Otherwise workers run under the
runner's own interpreter.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from membench import argtypes
from membench.env_var import Setting, SettingError
from membench.paths import REPO_ROOT

ENV_PREFIX = "MEMBENCH_PYTHON_"
# One variable per framework (variable()): the interpreter its workers run under.
PYTHON = Setting(
    f"{ENV_PREFIX}<FRAMEWORK>", argtypes.python_interpreter, "path to a Python 3",
    "the interpreter a framework's workers run under; MEMBENCH_PYTHON_3_12 and the like: the "
    "Python 3.12 a release's environment is built on", "membench/interpreters.py",
)  # fmt: skip


class InterpreterError(RuntimeError):
    """A per-framework interpreter that is named but cannot be run."""


def variable(framework: str) -> str:
    """The variable naming a framework's interpreter: jittor -> MEMBENCH_PYTHON_JITTOR."""
    return ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", framework.upper())


def framework_python(framework: str) -> str:
    """The interpreter that runs this framework's workers (relative paths: from the checkout)."""
    try:
        given = PYTHON.value(name=variable(framework))  # checked: it runs Python 3
    except SettingError as exc:
        raise InterpreterError(str(exc)) from None
    if given is None:
        local = REPO_ROOT / f".venv-{framework}" / "bin" / "python"
        return str(local) if os.access(local, os.X_OK) else sys.executable
    return str(given)


def distribution_installed(python: str, distribution: str) -> bool:
    """Whether a distribution is installed for another interpreter, without importing it."""
    probe = (
        "import importlib.metadata as m, sys\n"
        "try: m.version(sys.argv[1])\n"
        "except m.PackageNotFoundError: sys.exit(1)"
    )
    try:
        # -I: only what is installed, not a checkout's egg-info in the working directory
        done = subprocess.run(
            [python, "-I", "-c", probe, distribution], capture_output=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0
