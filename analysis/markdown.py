"""Markdown tables as the results pages print them."""

from __future__ import annotations

import pandas as pd

from analysis.labels import for_people


def _text(value: object) -> str:
    """A table cell: no pipe or newline can break the row; floats in short general form."""
    if isinstance(value, float):
        text = "-" if pd.isna(value) else f"{value:g}"
    else:
        text = "-" if value is None or value is pd.NA else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub Markdown table of a frame's columns (named for people) and rows, in their
    order."""
    frame = for_people(frame)
    lines = [
        "| " + " | ".join(_text(c) for c in frame.columns) + " |",
        "|" + "---|" * len(frame.columns),
    ]
    lines += ["| " + " | ".join(_text(v) for v in row) + " |" for row in frame.itertuples(False)]
    return "\n".join(lines)
