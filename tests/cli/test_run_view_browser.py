"""The HTML run view of the repository example, rendered by a real headless Chromium
(Debian's ``chromium`` package; the README's test command installs it when missing).

The test runs ``examples/repo-report.json`` with ``--record`` over a small tree,
draws the recording with ``graph --events --format html`` and has Chromium load the page
once, taking a screenshot and dumping the DOM it built; the test reads both.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from html.parser import HTMLParser

import pytest
from PIL import Image

from tests.support import REPO

CLI = [sys.executable, "-m", "a2e_host"]
EXAMPLE = REPO / "examples" / "repo-report.json"
WIDTH, HEIGHT = 1280, 1100
# the page's outcome fills (a2e_host.commands.graph.OUTCOME_FILLS), as sRGB pixels
DONE_FILL = (0xD3, 0xF9, 0xD8)
SKIPPED_FILL = (0xE9, 0xEC, 0xEF)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--disable-dev-shm-usage",  # a container's /dev/shm is often 64 MB
                  "--force-color-profile=srgb", f"--window-size={WIDTH},{HEIGHT}"]


def chromium() -> str:
    """The browser: ``A2E_CHROMIUM``, else ``chromium`` on PATH. Missing, the test fails
    (a skip would hide that the page was never checked)."""
    found = os.environ.get("A2E_CHROMIUM") or shutil.which("chromium")
    if not found:
        pytest.fail("Chromium is not installed: run 'apt-get install -y "
                    "--no-install-recommends chromium' (the README's test command does)")
    return found


@dataclass(frozen=True)
class Rendered:
    screenshot: Image.Image
    dom: str
    node_ids: list[str]


def render_example(tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    browser_path = chromium()
    root = tmp_path_factory.mktemp("tree")
    (root / "pkg").mkdir()
    (root / "a.py").write_text("import os\nprint(os.sep)\n", encoding="utf-8")
    (root / "pkg" / "b.py").write_text("x = 1\ny = 2\nz = x + y\n", encoding="utf-8")
    record = root.parent / "run.ndjson"
    run = subprocess.run([*CLI, "run", str(EXAMPLE), "--allow-proc", "wc", "--final",
                          "--record", str(record)], capture_output=True, text=True,
                         timeout=120, cwd=root)  # the fs root is the cwd
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)["summary"]
    assert summary == "small: 5 lines of Python in 2 files (at most 5000)"
    page = root.parent / "run.html"
    drawn = subprocess.run([*CLI, "graph", str(EXAMPLE), "--events", str(record),
                            "--format", "html"], capture_output=True, text=True, timeout=60)
    assert drawn.returncode == 0, drawn.stderr
    page.write_text(drawn.stdout, encoding="utf-8")
    shot = root.parent / "shot.png"
    profile = tmp_path_factory.mktemp("chromium-profile")
    browser = subprocess.run(
        [browser_path, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=90)
    assert browser.returncode == 0, browser.stderr[-2000:]
    node_ids = [n["node_id"] for n in json.loads(EXAMPLE.read_text())["nodes"]]
    with Image.open(shot) as image:
        return Rendered(image.convert("RGB"), browser.stdout, node_ids)


class _Dom(HTMLParser):
    """The diagram's node groups (``<g class="node OUTCOME" data-node-id=…>``) and the text
    of their ``<text class="nid">`` labels, as the browser serialised them."""

    def __init__(self) -> None:
        super().__init__()
        self.outcome: dict[str, str] = {}
        self.labels: list[str] = []
        self.tags: Counter[str] = Counter()
        self._in_label = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        found = dict(attrs)
        classes = (found.get("class") or "").split()
        if tag == "g" and classes[:1] == ["node"]:
            self.outcome[found.get("data-node-id") or ""] = classes[1]
        self._in_label = tag == "text" and classes == ["nid"]

    def handle_endtag(self, tag: str) -> None:
        self._in_label = False

    def handle_data(self, data: str) -> None:
        if self._in_label:
            self.labels.append(data)


def test_the_example_run_view_renders_in_headless_chromium(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    # one test, so the browser starts once whichever worker runs it
    rendered = render_example(tmp_path_factory)
    dom_shows_every_node_label(rendered)
    screenshot_is_a_drawing_not_a_blank_page(rendered)


def dom_shows_every_node_label(rendered: Rendered) -> None:
    dom = _Dom()
    dom.feed(rendered.dom)
    assert dom.labels == rendered.node_ids  # declaration order, each drawn once
    skipped = {"disagreed", "large"}  # wc -l agrees; 5 lines is small
    assert dom.outcome == {n: "skipped" if n in skipped else "done" for n in rendered.node_ids}
    assert dom.tags["script"] == 0 and dom.tags["svg"] == 1
    # self-contained: no address but the SVG namespace, nothing to fetch
    assert set(re.findall(r"\w+://[^\"' )]*", rendered.dom)) <= {"http://www.w3.org/2000/svg"}
    assert not re.search(r"\b(src|href)=", rendered.dom)
    assert "Failures</h2>" in rendered.dom and "<p class=\"note\">None.</p>" in rendered.dom


def screenshot_is_a_drawing_not_a_blank_page(rendered: Rendered) -> None:
    shot = rendered.screenshot
    assert shot.size == (WIDTH, HEIGHT)
    colours = Counter(dict((rgb, n) for n, rgb in shot.getcolors(WIDTH * HEIGHT) or []))
    assert len(colours) > 100  # text, boxes, bars: far from a single colour
    assert colours.most_common(1)[0][1] < WIDTH * HEIGHT * 0.95
    # 12 done boxes of 196×62 px and their timeline bars; 2 skipped boxes
    assert colours[DONE_FILL] > 12 * 150 * 50
    assert colours[SKIPPED_FILL] > 2 * 150 * 50
