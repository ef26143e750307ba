"""schemas/ is generated from the Structs and committed: it must not drift (STYLE.md)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from a2e_host.codec import MessageCodec
from a2e_host.commands.schema import (
    INDEX_FILE,
    plugin_message_types,
    render_schemas,
    schema_file_name,
    schema_main,
)
from a2e_host.messages import CORE_MESSAGE_TYPES
from tests.support import REPO

SCHEMAS = REPO / "schemas"

# what the host decodes: the core messages and every installed plugin's
DECODED = MessageCodec(CORE_MESSAGE_TYPES + plugin_message_types()).types


def test_committed_schemas_match_a_fresh_generation_byte_for_byte(tmp_path: Path) -> None:
    assert schema_main(tmp_path) == 0
    fresh = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    committed = {p.name: p.read_bytes() for p in SCHEMAS.iterdir() if p.is_file()}
    assert sorted(committed) == sorted(fresh), "regenerate: a2e-host schema --out schemas"
    for name, data in fresh.items():
        assert committed[name] == data, f"schemas/{name} is stale; regenerate it as above"


def test_there_is_one_schema_file_per_message_type_and_an_index() -> None:
    files = render_schemas()
    assert schema_file_name("chain/req") == "chain-req.schema.json"
    assert set(files) == {schema_file_name(t) for t in DECODED} | {INDEX_FILE}
    index = json.loads(files[INDEX_FILE])
    assert index["messages"] == {t: schema_file_name(t) for t in sorted(DECODED)}


def test_each_schema_pins_its_type_tag_and_lists_the_struct_fields() -> None:
    for message_type, cls in DECODED.items():
        schema = json.loads(render_schemas()[schema_file_name(message_type)])
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        body = schema["$defs"][schema["$ref"].rsplit("/", 1)[1]]
        assert body["properties"]["type"] == {"enum": [message_type]}
        assert list(body["properties"]) == ["type", *cls.__struct_fields__]


def test_the_chain_req_schema_describes_nodes_as_chain_nodes() -> None:
    schema = json.loads(render_schemas()["chain-req.schema.json"])
    node = schema["$defs"]["ChainNode"]
    assert node["required"] == ["node_id", "kind"]
    assert node["properties"]["on_error"] == {"type": "string", "default": "abort"}
    assert node["properties"]["input_map"]["additionalProperties"] == {"type": "string"}
    req = schema["$defs"]["ChainRequest"]["properties"]
    assert req["nodes"]["items"] == {"$ref": "#/$defs/ChainNode"}
    assert req["timeout"] == {"type": "integer", "default": 300}


def test_without_out_every_schema_is_printed_as_one_json_document(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert schema_main(None) == 0
    document = msgspec.json.decode(capsys.readouterr().out)
    assert sorted(document["messages"]) == sorted(DECODED)
    assert document["messages"]["ping"] == json.loads(render_schemas()["ping.schema.json"])


def test_an_unwritable_out_directory_fails_with_exit_code_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert schema_main(blocker / "schemas") == 1
    assert "cannot write schemas" in capsys.readouterr().err
