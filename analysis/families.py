"""Strategy families, read from a strategy's name: what a reader groups strategies by.

The records carry a strategy's name, not its knobs, and analysis does not import the
registry (membench.registry), so the family comes from the name by the small mapping below,
first match wins. A family groups and colours strategies; whether a row trains is the mode its
record stores (analysis.modes), which goes by the inference family only where a record says
nothing. A name none of the rules matches is "other". The rules follow the registry's
naming (docs/methodology.md lists the strategies):

    infer*, two-models-*                          inference
    ddp, zero*, fsdp*                             sharding
    accumulate-*                                  accumulation
    *checkpoint*                                  checkpointing (amp-bf16-checkpoint too)
    amp-*, tf32, *-bf16, *-fp16                   precision
    compile, no-fuse, fused-attention*,
    channels-last                                 compile & kernels (amp-bf16-channels-last:
                                                  precision, the first match)
    expandable-segments, managed-allocator,
    save-mem, mmap-threshold, host-data, hygiene-*
                                                  allocator & host
    baseline                                      baseline
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import seaborn as sns

BASELINE = "baseline"
INFERENCE = "inference"
# family -> name pattern (re.fullmatch), in the order they are tried
RULES: dict[str, str] = {
    BASELINE: r"baseline",
    INFERENCE: r"infer.*|two-models-.*",
    "sharding": r"ddp|zero\d.*|fsdp.*",
    "accumulation": r"accumulate-.*",
    "checkpointing": r".*checkpoint.*",
    "precision": r"amp-.*|tf32|.*-bf16|.*-fp16",
    "compile & kernels": r"compile|no-fuse|fused-attention.*|channels-last",
    "allocator & host": (
        r"expandable-segments|managed-allocator|save-mem|mmap-threshold|host-data|hygiene-.*"
    ),
}
OTHER = "other"
# the order families are shown in: training levers first, inference last
FAMILIES = [
    BASELINE, "precision", "checkpointing", "accumulation", "compile & kernels",
    "allocator & host", "sharding", INFERENCE, OTHER,
]  # fmt: skip
# a family's colour (matplotlib's tab10, distinct at a glance); its strategies are shades of it
COLOURS = {
    BASELINE: "black", "precision": "tab:red", "checkpointing": "tab:orange",
    "accumulation": "tab:blue", "compile & kernels": "tab:pink", "allocator & host": "tab:brown",
    "sharding": "tab:purple", INFERENCE: "tab:green", OTHER: "tab:gray",
}  # fmt: skip


def family(strategy: str) -> str:
    for name, pattern in RULES.items():
        if re.fullmatch(pattern, strategy):
            return name
    return OTHER


def strategy_order(names: Iterable[str]) -> list[str]:
    """Baseline first, then family by family, by name within a family."""
    return sorted(set(names), key=lambda s: (FAMILIES.index(family(s)), s))


def family_colours(names: Iterable[str]) -> dict[str, tuple[float, float, float]]:
    """Each strategy a shade of its family's colour (darkest first): a reader sees the family
    at a glance and the strategy from the label or legend."""
    colours = {}
    order = strategy_order(names)
    for fam in FAMILIES:
        members = [s for s in order if family(s) == fam]
        if members:
            # the two lightest shades of the ramp vanish on white: skipped
            shades = sns.light_palette(COLOURS[fam], len(members) + 2)[2:][::-1]
            colours.update(zip(members, shades, strict=True))
    return colours


def family_colour(fam: str) -> tuple[float, float, float]:
    return sns.color_palette([COLOURS[fam]])[0]
