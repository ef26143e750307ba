"""examples/languages.json on pycountry's ISO 639-3 table, checked against json.load here."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.support import REPO

CHAIN = REPO / "examples" / "languages.json"


def pycountry_dir() -> Path:
    spec = importlib.util.find_spec("pycountry")
    assert spec is not None and spec.submodule_search_locations, (
        "pycountry is not installed; it ships the data set: pip install -e '.[test]'"
    )
    return Path(next(iter(spec.submodule_search_locations)))


def test_language_report_matches_the_table_read_directly() -> None:
    root = pycountry_dir()
    languages = json.loads((root / "databases" / "iso639-3.json").read_text("utf-8"))["639-3"]
    done = subprocess.run(
        [sys.executable, "-m", "a2e_host", "run", str(CHAIN), "--root", str(root), "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads(done.stdout)["final_output"]

    types = Counter(lang["type"] for lang in languages)
    scopes = Counter(lang["scope"] for lang in languages)
    constructed = [lang for lang in languages if lang["type"] == "C"]
    assert len(languages) > 7000 and len(constructed) > 10  # the real table, not a stub
    assert report["total"] == len(languages)
    assert report["by_type"] == {
        "living": types["L"], "extinct": types["E"], "historical": types["H"],
        "ancient": types["A"], "constructed": types["C"], "special": types["S"],
    }
    assert report["by_scope"] == {
        "individual": scopes["I"], "macrolanguage": scopes["M"], "special": scopes["S"],
    }
    assert report["with_alpha_2"] == sum(1 for lang in languages if lang.get("alpha_2"))
    assert report["constructed"] == {
        "labels": [f"{lang['alpha_3']}: {lang['name']}" for lang in constructed],
        "longest_name": max((lang["name"] for lang in constructed), key=len),
        "name_words": sum(len(lang["name"].split()) for lang in constructed),
    }
