"""asv's published pages without a network: the scripts and style sheet asv 0.6 loads from
CDNs (jQuery, flot, bootstrap, stupidtable, md5) are served from the published folder.

scripts/install.sh installs them from the npm registry (`npm ci` in scripts/dashboard: pinned
versions, each package checked against package-lock.json's integrity hash); asv publish copies
them into <html_dir>/vendor and points its pages at them (the asv plugin's publisher,
membench/publish/asv_plugin.py). Where npm's file is the very file the CDN serves, its bytes are
checked against the page's own integrity hash too; flot's and stupidtable's CDN copies were
minified by the CDN (flot) or are a release npm does not hold (stupidtable 1.0.1; npm has
1.1.3, the same plugin API), so those are npm's. A CDN address left on a page after the
rewrite is an error: asv changed its pages, and this table must follow.
"""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
from pathlib import Path

from membench.paths import REPO_ROOT

NODE_MODULES = REPO_ROOT / "scripts" / "dashboard" / "node_modules"
VENDOR = "vendor"

# CDN address on asv 0.6.6's pages -> (file in node_modules, whether it is the CDN's file)
SCRIPTS = {
    "https://code.jquery.com/jquery-3.3.1.min.js": ("jquery/dist/jquery.min.js", True),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js": (
        "flot/jquery.flot.js", False,
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.time.min.js": (
        "flot/jquery.flot.time.js", False,
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.selection.min.js": (
        "flot/jquery.flot.selection.js", False,
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.categories.min.js": (
        "flot/jquery.flot.categories.js", False,
    ),
    "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js": (
        "flot-orderbars/js/jquery.flot.orderBars.js", True,
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js": (
        "stupid-table-plugin/stupidtable.min.js", False,
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js": (
        "blueimp-md5/js/md5.min.js", True,
    ),
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js": (
        "bootstrap/dist/js/bootstrap.min.js", True,
    ),
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css": (
        "bootstrap/dist/css/bootstrap.min.css", True,
    ),
}  # fmt: skip
# bootstrap's style sheet loads its icon font from ../fonts/
EXTRA = ["bootstrap/dist/fonts"]

_TAG = re.compile(r'<(script|link)\b[^>]*?(?:src|href)="(https?://[^"]+)"[^>]*>')
_INTEGRITY = re.compile(r'integrity="(sha\d+)-([^"]+)"')


class DashboardError(RuntimeError):
    """The local copies are missing, differ from the CDN's, or a page still loads a CDN."""


def _sri_matches(tag: str, path: Path) -> bool:
    found = _INTEGRITY.search(tag)
    if not found:
        return True
    algorithm, expected = found.groups()
    digest = hashlib.new(algorithm, path.read_bytes()).digest()
    return base64.b64encode(digest).decode() == expected


def _local_tag(kind: str, tag: str, src: str) -> str:
    if kind == "link":
        return f'<link rel="stylesheet" href="{src}">'
    onerror = ' onerror="js_load_failure()"' if "onerror=" in tag else ""
    return f'<script src="{src}"{onerror}>'  # the page's own </script> follows


def localize(html_dir: Path, node_modules: Path = NODE_MODULES) -> list[str]:
    """Copy the vendored files into html_dir/vendor and point every page at them; the pages
    rewritten. Raises DashboardError where it cannot."""
    if not node_modules.is_dir():
        raise DashboardError(
            f"{node_modules} is missing: run scripts/install.sh (npm ci in scripts/dashboard) "
            "so that asv's pages load their scripts from the published folder"
        )
    vendor = html_dir / VENDOR
    for relative, _ in SCRIPTS.values():
        source = node_modules / relative
        if not source.is_file():
            raise DashboardError(f"{source} is missing: run scripts/install.sh")
        (vendor / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, vendor / relative)
    for relative in EXTRA:
        shutil.copytree(node_modules / relative, vendor / relative, dirs_exist_ok=True)
    rewritten = []
    for page in sorted(html_dir.glob("*.html")):
        text = page.read_text(encoding="utf-8")

        def local(match: re.Match) -> str:
            tag, kind, url = match.group(0), match.group(1), match.group(2)
            if url not in SCRIPTS:
                return tag  # a link to a web page, not something the page loads
            relative, same_file = SCRIPTS[url]
            if same_file and not _sri_matches(tag, node_modules / relative):
                raise DashboardError(f"{relative} differs from {url} (its integrity hash)")
            return _local_tag(kind, tag, f"{VENDOR}/{relative}")

        new = _TAG.sub(local, text)
        left = [u for u in re.findall(r'(?:src|href)="(https?://[^"]+)"', new) if _loads(new, u)]
        if left:
            raise DashboardError(f"{page.name} still loads {', '.join(left)} from the network")
        if new != text:
            page.write_text(new, encoding="utf-8")
            rewritten.append(page.name)
    return rewritten


def _loads(page: str, url: str) -> bool:
    """Whether a page loads url (a script or style sheet), not merely links to it."""
    return bool(re.search(rf'<(script|link)\b[^>]*(?:src|href)="{re.escape(url)}"', page))
