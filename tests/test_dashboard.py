"""asv's dashboard renders with no network: `asv publish` serves the scripts its pages load
from the published folder (membench/publish/dashboard.py), and headless Chromium draws the
graphs."""

import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from membench.publish import dashboard

from .conftest import REPO

pytest.importorskip("asv")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# every host name resolves to nothing but the preview server's: no CDN can answer
OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"
ERROR_PAGE = "Can not determine continental origin of swallow"


def test_pages_that_still_load_a_cdn_are_refused(tmp_path):
    if not dashboard.NODE_MODULES.is_dir():
        pytest.skip("scripts/install.sh has not installed the dashboard's scripts (npm)")
    url, (relative, _) = next(iter(dashboard.SCRIPTS.items()))
    page = tmp_path / "index.html"
    page.write_text(
        f'<script src="{url}" integrity="sha256-AAAA" crossorigin="anonymous" '
        'onerror="js_load_failure()"></script>'
    )
    with pytest.raises(dashboard.DashboardError, match="differs from"):
        dashboard.localize(tmp_path)  # jQuery is checked against the page's integrity hash
    page.write_text('<script src="https://cdn.example.org/other.js"></script>')
    with pytest.raises(dashboard.DashboardError, match="still loads https://cdn.example.org"):
        dashboard.localize(tmp_path)
    page.write_text(f'<script src="{url}" onerror="js_load_failure()"></script>')
    assert dashboard.localize(tmp_path) == ["index.html"]
    assert page.read_text() == (
        f'<script src="vendor/{relative}" onerror="js_load_failure()"></script>'
    )
    assert (tmp_path / "vendor" / relative).is_file()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def preview(tmp_path_factory):
    """`asv publish` of the committed results, served by `asv preview`."""
    if CHROMIUM is None:
        pytest.skip("no chromium: scripts/install.sh installs Debian's (as root)")
    html = tmp_path_factory.mktemp("html")
    asv = [sys.executable, "-m", "asv"]
    out = subprocess.run(
        [*asv, "publish", "--html-dir", str(html)], cwd=REPO, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    port = _free_port()
    server = subprocess.Popen(
        [*asv, "preview", "--html-dir", str(html), "--port", str(port)], cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(base, timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield base, html
    finally:
        server.kill()
        server.wait()


def _dom(url: str) -> str:
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", OFFLINE,
         "--virtual-time-budget=15000", "--dump-dom", url],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_published_pages_load_nothing_from_the_network(preview):
    _, html = preview
    for page in html.glob("*.html"):
        text = page.read_text()
        assert "cdn" not in text and "code.jquery.com" not in text, page.name


def test_the_index_draws_its_graphs_offline(preview):
    base, _ = preview
    dom = _dom(base)
    assert ERROR_PAGE not in dom
    assert "flot-base" in dom  # flot's canvas: a graph was drawn
    assert "Resnet50_cpu.track_peak_host_rss" in dom


def test_a_graph_page_draws_its_graph_offline(preview):
    base, _ = preview
    dom = _dom(f"{base}#suite.Resnet50_cpu.track_peak_host_rss?p-framework=%27jax%27")
    assert ERROR_PAGE not in dom
    assert dom.count("flot-base") >= 1
    assert "suite.Resnet50_cpu.track_peak_host_rss" in dom
