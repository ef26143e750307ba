"""README.md's samples agree with the host: the handshake's ``features`` are the ones a
real ``a2e-host stdio`` sends, and the "Writing a tool pack" example is one pack (its
entry point and its ``ToolPack`` have the same name) that runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import anyio

from a2e_host.config import HostConfig
from a2e_host.tools import ToolPack, load_tools
from tests.support import REPO

README = REPO / "README.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text("utf-8"), re.M | re.S)


def test_the_sample_handshake_lists_the_features_the_host_sends() -> None:
    sample = next(line for block in blocks("json") for line in block.splitlines()
                  if line.startswith('{"type":"handshake/resp"'))
    found = re.search(r'"features":(\[[^\]]*\])', sample)
    assert found is not None
    documented = json.loads(found.group(1))
    done = subprocess.run(
        [sys.executable, "-m", "a2e_host", "stdio"], capture_output=True, text=True,
        timeout=60, input='{"type":"handshake/req","id":"h1","agent_caps":["chains"]}\n',
    )
    resp = json.loads(done.stdout.splitlines()[0])
    assert resp["type"] == "handshake/resp", resp
    assert documented == resp["accepted_caps"][0]["metadata"]["features"]


def test_the_tool_pack_example_is_one_pack_and_runs(tmp_path: Path) -> None:
    toml = next(b for b in blocks("toml") if "a2e_host.tools" in b)
    entry = tomllib.loads(toml)["project"]["entry-points"]["a2e_host.tools"]
    ((name, target),) = entry.items()
    code = next(b for b in blocks("python") if "ToolPack(" in b)
    module, attr = target.split(":")
    assert code.startswith(f"# {module}/__init__.py\n")
    namespace: dict[str, object] = {"__name__": module}
    exec(compile(code, f"README.md:{module}", "exec"), namespace)  # our own example
    pack = namespace[attr]
    assert isinstance(pack, ToolPack)
    assert pack.name == name
    (tmp_path / "a.txt").write_bytes(b"12345")
    tools = load_tools(HostConfig(tools=(name,), root=str(tmp_path)), packs={name: pack})
    size = tools.get("file_size")
    assert size is not None
    assert anyio.run(size.invoke, {"path": "a.txt"}) == {"path": "a.txt", "bytes": 5}


def section(heading: str) -> str:
    text = README.read_text("utf-8")
    start = text.index(f"\n{heading}\n")
    end = text.index("\n#", start + len(heading) + 2)
    return text[start:end]


def test_the_durable_runs_section_states_which_in_flight_nodes_survive_a_restart() -> None:
    durable = " ".join(section("### Durable runs").split())
    assert "declared `idempotent` or the node sets `\"resume\": \"rerun\"`" in durable
    assert "ends with error code `interrupted`" in durable
    assert '[PROTOCOL.md §5 "Resume after a restart"](docs/PROTOCOL.md)' in durable
    protocol = (REPO / "docs" / "PROTOCOL.md").read_text("utf-8")
    running = protocol[protocol.index("\n## 5. Running\n"):protocol.index("\n## 6. ")]
    assert "**Resume after a restart**" in running


def test_the_long_lived_process_example_prints_what_its_comments_say(tmp_path: Path) -> None:
    code = next(b for b in blocks("python") if "spawn_proc" in b)
    promised = [line.split("# ", 1)[1].strip() for line in code.splitlines()
                if "print(" in line]
    assert promised[0].startswith("ProcOutput(")
    script = tmp_path / "procs.py"
    script.write_text(code, "utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=90, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == promised
