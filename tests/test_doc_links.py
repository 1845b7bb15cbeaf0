"""Every relative link in README.md and docs/**/*.md points at a file or folder that exists:
a newcomer's path through the documents has no dead step. Links inside code are not links."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from .conftest import REPO

DOCUMENTS = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE = re.compile(r"(`+).+?\1", re.S)
LINKS = [
    re.compile(
        r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
    ),  # [t](target)
    re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M),  # [ref]: target
    re.compile(r"<(?:a|img)\s[^>]*?(?:href|src)=\"([^\"]+)\"", re.I),  # <a href>, <img src>
]
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:, ...


def relative_links(text: str) -> list[str]:
    """The targets of a Markdown text's relative links (anchors and URLs left out), fragment
    and query removed."""
    text = CODE.sub("", FENCE.sub("", text))
    found = []
    for pattern in LINKS:
        for target in pattern.findall(text):
            if EXTERNAL.match(target) or target.startswith("#"):
                continue
            found.append(unquote(re.split(r"[#?]", target)[0]))
    return found


def test_links_are_found_outside_code_only():
    text = (
        "See [the guide](docs/extending.md#strategy), ![plot](img/a.png 'x'), "
        '<a href="docs/gpu.md">GPU</a>, [web](https://example.org) and [top](#top).\n'
        "[ref]: docs/cluster.md\n`[not](a-link.md)`\n```\n[nor](this.md)\n```\n"
    )
    assert relative_links(text) == [
        "docs/extending.md", "img/a.png", "docs/cluster.md", "docs/gpu.md",
    ]  # fmt: skip


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_exists(document: Path):
    text = document.read_text(encoding="utf-8")
    dead = [t for t in relative_links(text) if not (document.parent / t).exists()]
    assert dead == [], f"{document.relative_to(REPO)} links to missing files"
