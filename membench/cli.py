"""membench command line: parse (membench.commands, one module per command), dispatch, and
turn the errors every command shares into one line and an exit status."""

from __future__ import annotations

import json
import sys

from membench import registry, settings
from membench.cells import termination
from membench.cells.engines import EngineError
from membench.commands import build_parser
from membench.commands.parsing import BadInput, fail
from membench.file_rules import UnusableFileError
from membench.records import RecordNotSavedError, StoreFullError
from membench.registry.plugins import PluginError
from membench.releases.versions import VersionsFileError
from membench.store_lock import StoreLockError


def main(argv: list[str] | None = None) -> int:
    try:
        registry.load_plugins()  # the commands list and iterate the tables whole
        settings.check()  # every MEMBENCH_ variable set, read as a flag is, before any work
    except (PluginError, settings.SettingError) as exc:
        return fail(str(exc))
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # a refused argument (2) or --help (0)
        return int(exc.code or 0)
    engine = getattr(args, "engine", None)
    if engine == "local" and (args.address or args.cells_per_node != 1):
        return fail("--address and --cells-per-node need --engine ray")
    try:
        return args.func(args)
    except (
        registry.UnknownNameError, VersionsFileError, BadInput, StoreLockError, PluginError,
        settings.SettingError, UnusableFileError,
    ) as exc:  # fmt: skip
        return fail(str(exc))
    except RecordNotSavedError as exc:  # nothing measured is lost: the record goes to stdout
        print(json.dumps(exc.record.to_dict(), sort_keys=True))
        print(f"membench: error: {exc}; the record is printed above", file=sys.stderr)
        return 1
    except StoreFullError as exc:
        print(f"membench: error: {exc}", file=sys.stderr)
        return 1
    except (ImportError, ConnectionError, EngineError) as exc:
        if engine != "ray":
            raise
        return fail(f"engine ray: {exc}")
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP turned into one
        signum = exc.signum if isinstance(exc, termination.Terminated) else None
        signum = signum or (termination.received[-1] if termination.received else None)
        return 128 + signum if signum else 130
