"""The adapter for the public SDK's host (conformance/adapters/a2e_sdk_stdio.py).

Running the SDK's host needs an SDK checkout and the SDK's own dependencies (pydantic,
fastapi, requests), neither of which a fresh machine has without the network: the
verdicts of a run against it are recorded in conformance/README.md ("A worked example"),
not re-run here. What is checked here is the adapter's own part, which needs only the
standard library: it keeps the host's lines whole, serves the §7 fixture tools as the
kit expects them, and refuses a directory that is not an SDK checkout.
"""

from __future__ import annotations

import io
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conformance.adapters import a2e_sdk_stdio as adapter
from tests.support import REPO


def test_the_fixture_tools_answer_as_protocol_md_section_7_says() -> None:
    assert adapter._fixture("echo", {"a": [1]}) == {"a": [1]}
    assert adapter._fixture("add", {"a": 2, "b": 3.5}) == {"sum": 5.5}
    assert adapter._fixture("concat", {"parts": ["a", "b"]}) == {"text": "ab"}
    assert adapter._fixture("count", {"items": [1, 2, 3]}) == {"count": 3}
    assert adapter._fixture("upper", {"text": "hi"}) == {"text": "HI"}
    assert adapter._fixture("sleep", {"seconds": 0, "value": 7}) == {"slept": 0, "value": 7}
    assert adapter._fixture("big", {"bytes": 3}) == {"data": "xxx"}
    key = f"k{id(object())}"
    with pytest.raises(ValueError, match="flaky"):
        adapter._fixture("flaky", {"key": key, "failures": 1})
    assert adapter._fixture("flaky", {"key": key, "failures": 1}) == {"attempts": 2}
    with pytest.raises(ValueError, match="boom"):
        adapter._fixture("fail", {"message": "boom"})
    with pytest.raises(KeyError):
        adapter._fixture("add", {"a": 1})  # a wrong input shape fails the node


def test_lines_written_by_several_threads_stay_whole() -> None:
    raw = io.BytesIO()
    out = adapter._LineWriter(raw)

    def write(tag: str) -> None:
        for i in range(200):
            out.write(f"{tag}-{i}")  # print() writes the text, then the newline
            out.write("\n")

    threads = [threading.Thread(target=write, args=(t,)) for t in "abcd"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = raw.getvalue().decode().splitlines()
    assert len(lines) == 800
    assert all(line.split("-")[0] in "abcd" and line.count("-") == 1 for line in lines)


def test_the_adapter_refuses_a_directory_that_is_no_sdk_checkout(tmp_path: Path) -> None:
    script = REPO / "conformance" / "adapters" / "a2e_sdk_stdio.py"
    done = subprocess.run([sys.executable, str(script), "--sdk", str(tmp_path)],
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert "is not an A2E python-sdk checkout" in done.stderr
    assert done.stdout == ""
