"""Installs one framework version's environment: run by asv inside the environment it made.

Usage (asv's install_command): python scripts/install_stack.py WHEEL
The spec comes from MEMBENCH_STACK (a line of requirements/versions.txt, set by asv's matrix);
the suite's wheel brings its own dependencies. Standard library only: nothing else is
installed yet when this runs.
"""

import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    spec = os.environ.get("MEMBENCH_STACK", "").split()
    if len(argv) != 2 or not spec:
        print("usage: MEMBENCH_STACK='pkg==x ...' python install_stack.py WHEEL", file=sys.stderr)
        return 2
    pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check"]
    command = [*pip, *spec, argv[1]]
    print("installing:", " ".join(spec), flush=True)
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
