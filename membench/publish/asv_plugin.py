"""asv plugin (asv.conf.json "plugins"): the checkout's own environment and machine, so that
`asv run` records into the committed history from any clone, with no flag to remember.

- The environment is the interpreter asv runs under (the checkout's .venv, as `existing`
  would use), but named `checkout-py<X.Y>` rather than after its path: asv's `existing`
  environment is named after the interpreter's full path, which made every clone's results
  an environment apart from the committed history.
- The machine asv assumes without --machine is membench's machine name (environment.
  machine_name: what the hardware is, the name results/ is organised by), not the host name;
  scripts/install.sh describes it to asv once, with `python -m membench.publish.asv_plugin` (stable
  fields only, written whole: see describe).
- asv publish's pages load their scripts from the published folder, not from CDNs
  (membench/publish/dashboard.py): the dashboard renders with no network.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

from asv.environment import ExistingEnvironment, get_env_name
from asv.machine import Machine
from asv.publishing import OutputPublisher

ENVIRONMENT_TYPE = "checkout"


class CheckoutEnvironment(ExistingEnvironment):
    """The interpreter asv runs under, with the suite installed in it; never built by asv."""

    tool_name = ENVIRONMENT_TYPE

    def __init__(self, conf, python, requirements, tagged_env_vars):
        super().__init__(conf, sys.executable, requirements, tagged_env_vars)
        # asv's results carry this as the environment's "python": the version, not the path
        self._python = f"{sys.version_info[0]}.{sys.version_info[1]}"

    @classmethod
    def matches(cls, python: str) -> bool:
        return False  # chosen by name (environment_type) only

    @property
    def name(self) -> str:
        return get_env_name(self.tool_name, self._python, {}, self._tagged_env_vars)


class LocalScripts(OutputPublisher):
    """asv's publish step for output pages, used here to copy the scripts its pages load into
    the published folder and point the pages at them (it adds no page of its own)."""

    name = "local-scripts"
    button_label = ""
    description = "scripts served from the published folder (membench/publish/dashboard.py)"

    @classmethod
    def publish(cls, conf, repo, benchmarks, graphs, revisions) -> None:
        from membench.publish.dashboard import localize

        localize(Path(conf.html_dir))


def setup() -> None:
    """Called by asv when it loads the plugin."""
    from membench.environment import machine_name

    Machine.hardcoded_machine_name = machine_name()


FIELDS = ("os", "arch", "cpu", "num_cpu", "ram")


def describe(machine: str, fields: Mapping[str, str]) -> None:
    """Write asv's entry for machine (~/.asv-machine.json) as exactly these fields. `asv
    machine` keeps only the fields that differ from its own defaults (arch, num_cpu and cpu
    never stored) over whatever an older entry held, so its machine.json depended on that
    entry's history; asv's run copies the entry into results/asv/<machine>/machine.json and
    into every result's params."""
    from asv.machine import MachineCollection

    MachineCollection.save(machine, {"machine": machine, **{k: fields[k] for k in FIELDS}})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="describe a machine to asv, stable fields only")
    for name in ("machine", *FIELDS):
        parser.add_argument(f"--{name}", required=True)
    args = vars(parser.parse_args())
    describe(args.pop("machine"), args)
