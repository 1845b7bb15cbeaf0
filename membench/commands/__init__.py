"""The membench commands, one module each: `add_parser(sub)` declares its arguments and sets
`func`, the function that runs it (most are `main(args)`). COMMANDS is the order `membench
--help` lists them in; EXAMPLES, each command's example at the end of its help; membench.cli
parses and dispatches. What they share: parsing (the console, refusals, the parser), selection
(the cells a command works on), run_options (how a measuring command runs them) and
store_guard (what guards a store while it runs)."""

from __future__ import annotations

import argparse
import importlib

from membench.commands.parsing import Parser

COMMANDS = (
    "listing", "run", "bench", "versions", "capacity", "calibrate", "predict", "gpu_predict",
    "plan", "archive", "compare", "report", "selfcheck", "show",
)  # fmt: skip


# Per command (as typed), a command line and what it does; a test parses each one.
EXAMPLES = {
    "list": ("membench list --matrix", "which framework runs which strategy, and how"),
    "run": (
        "membench run -w resnet50 -f torch -s baseline,checkpoint -b 2,4",
        "four cells, their records printed and kept in .membench/records/",
    ),
    "bench": ("membench bench -w resnet50 -f jax", "one part of the main job (resumable)"),
    "versions": (
        "membench versions --only jax -w resnet50 -s baseline",
        "ResNet-50's baseline under every JAX release of requirements/versions.txt",
    ),
    "capacity": (
        "membench capacity --budget 2GiB -w resnet50 -f torch -s baseline,checkpoint",
        "the largest batch of each strategy within 2 GiB",
    ),
    "calibrate": ("membench calibrate -f torch", "torch's memory-model constants"),
    "predict": ("membench predict --check", "exit 1 if a stored record's prediction is stale"),
    "gpu-predict": (
        "membench gpu-predict -w transformer -f torch -s amp-bf16 -b 8 --card rtx-4090",
        "GPT-2 small's mixed-precision step on a 24 GB card, predicted on this host",
    ),
    "plan": ("membench plan gpu-quick resnet50", "run the gpu-quick plan's resnet50 part"),
    "pack": ("membench pack /tmp/h100.tar.gz", "this machine's results as one archive"),
    "unpack": ("membench unpack /tmp/h100.tar.gz", "that archive's results into results/"),
    "compare": (
        "membench compare jax-0.7.1 jax-0.10.2 -w resnet50",
        "each ResNet-50 benchmark's change between the two JAX releases",
    ),
    "report": ("membench report --out /tmp/report", "the HTML report of results/"),
    "selfcheck": ("membench selfcheck -f torch", "torch's suite cells beside its plain loop"),
    "show": (
        "membench show .membench/records/MACHINE/cpu-quick",
        "the records `membench run` kept there (MACHINE: the name `membench list` prints)",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="membench", description="Memory and speed of deep-learning frameworks.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name in COMMANDS:
        importlib.import_module(f"membench.commands.{name}").add_parser(sub)
    for name, command in sub.choices.items():
        line, what = EXAMPLES[name]
        command.epilog = f"example:\n  {line}\n      {what}"
        command.formatter_class = argparse.RawDescriptionHelpFormatter  # keeps the epilog's lines
    return parser
