"""Redaction and the secret sources, unit by unit (README "Secrets"): every written form of
a value, overlapping values, frames that stay valid JSON, log lines, the codec's one hook,
and the configuration's env / file sources read safely."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import structlog

from a2e_host import secrets
from a2e_host.chains.messages import ChainEvent, ChainRequest
from a2e_host.codec import encode_message
from a2e_host.config import load_config
from a2e_host.logs import configure_logging
from a2e_host.redaction import Redactor
from a2e_host.telemetry.tracing import set_run_attributes
from tests.support.secret_values import HOST_VALUE, REQUEST_VALUE, forms, leaks


@pytest.fixture
def registered() -> Iterator[None]:
    token = secrets.register({"HOSTKEY": HOST_VALUE, "REQKEY": REQUEST_VALUE})
    try:
        yield
    finally:
        secrets.unregister(token)


def test_every_written_form_of_a_value_is_replaced_by_its_name() -> None:
    redactor = Redactor({"K": HOST_VALUE})
    for form in forms(HOST_VALUE):
        assert redactor.redact(f"<{form.decode()}>") == "<«secret:K»>", form


def test_a_value_inside_another_is_replaced_whole_and_overlaps_never_leave_a_whole_value() -> None:
    redactor = Redactor({"SHORT": "abcdefgh", "LONG": "xxabcdefghyy", "OVER": "fghijklm"})
    assert redactor.redact("xxabcdefghyy") == "«secret:LONG»"
    shown = redactor.redact("abcdefghijklm")
    assert "abcdefgh" not in shown and "fghijklm" not in shown


def test_a_frame_stays_valid_json_when_a_value_equals_a_number_in_it() -> None:
    redactor = Redactor({"PIN": "12345678"})
    out = redactor.redact_frame(b'{"n":12345678,"s":"pin 12345678","12345678":1}')
    assert json.loads(out) == {"n": 12345678, "s": "pin «secret:PIN»", "«secret:PIN»": 1}


def test_scrub_returns_the_same_object_when_nothing_matches_and_a_copy_otherwise() -> None:
    redactor = Redactor({"K": HOST_VALUE})
    clean = {"a": [1, "two"]}
    assert redactor.scrub(clean) is clean
    assert redactor.scrub({HOST_VALUE: [f"x{HOST_VALUE}"]}) == {"«secret:K»": ["x«secret:K»"]}


def test_the_host_encodes_no_registered_value_but_a_client_sends_its_own(registered: None) -> None:
    event = ChainEvent(req_id="r", seq=1, node_id="n", phase="error", error=f"bad {HOST_VALUE}")
    assert leaks(encode_message(event), HOST_VALUE) == []
    request = ChainRequest(nodes=[], secrets={"REQKEY": REQUEST_VALUE})
    assert msgspec.json.decode(encode_message(request, redact=False))["secrets"] == {
        "REQKEY": REQUEST_VALUE}
    assert msgspec.json.decode(encode_message(request))["secrets"] == {
        "REQKEY": "«secret:REQKEY»"}


def test_with_no_secret_registered_frames_and_text_pass_through_untouched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(secrets, "active_redactor", None)
    token = secrets.register({})  # nothing to redact: nothing is built
    assert secrets.redactor() is None
    secrets.unregister(token)
    text = f"value {HOST_VALUE}"
    assert secrets.redact(text) is text
    event = ChainEvent(req_id="r", seq=1, node_id="n", phase="error", error=text)
    assert leaks(encode_message(event), HOST_VALUE) != []  # written as it is


def test_log_lines_fields_and_tracebacks_are_redacted(registered: None) -> None:
    stream = io.StringIO()
    configure_logging(format="json", level="debug", stream=stream)
    try:
        log = structlog.get_logger()
        log.debug("node failed", error=f"x {REQUEST_VALUE}", data={"k": HOST_VALUE})
        try:
            raise ValueError(f"boom {HOST_VALUE}")
        except ValueError as exc:
            log.error("raised", exc_info=exc)
    finally:
        configure_logging(format="json", level="warning", stream=io.StringIO())
    written = stream.getvalue()
    assert "«secret:REQKEY»" in json.loads(written.splitlines()[0])["error"]
    assert "boom «secret:HOSTKEY»" in written
    assert leaks(written.encode(), HOST_VALUE, REQUEST_VALUE) == []


def _load(tmp_path: Path, table: str, **env: str) -> secrets.Secret:
    path = tmp_path / "host.toml"
    path.write_text(f"[secrets]\nK = {table}\n", encoding="utf-8")
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return load_config(path, environ={}).secrets["K"]
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_a_secret_file_is_read_relative_to_the_config_its_newline_dropped(tmp_path: Path) -> None:
    (tmp_path / "k.txt").write_text("file-secret-value\r\n", encoding="utf-8")
    secret = _load(tmp_path, '{file = "k.txt", tools = ["a.*"]}')
    assert secret.value == "file-secret-value"
    assert secret.allows_tool("a.b") and not secret.allows_tool("b")
    assert "file-secret-value" not in repr(secret)


@pytest.mark.parametrize(("table", "env", "says"), [
    ('{env = "SP_UNSET_VAR"}', {}, "environment variable SP_UNSET_VAR is not set"),
    ('{env = "SP_SHORT"}', {"SP_SHORT": "1234567"}, "shorter than 8 characters"),
    ('{file = "big.txt"}', {}, "is over 65536 bytes"),
    ('{file = "dir"}', {}, "is not a regular file"),
    ('{env = "A", file = "b"}', {}, "exactly one of env"),
    ('{env = "A", tool = ["x"]}', {}, "unknown key 'tool'"),
])
def test_a_bad_secret_source_stops_the_start_naming_it_never_its_value(
    tmp_path: Path, table: str, env: dict[str, str], says: str,
) -> None:
    (tmp_path / "big.txt").write_text("x" * 65_537, encoding="utf-8")
    (tmp_path / "dir").mkdir()
    with pytest.raises(ValueError, match=says) as refused:
        _load(tmp_path, table, **env)
    assert "secret 'K'" in str(refused.value) and "1234567" not in str(refused.value)


class _Span:
    def __init__(self) -> None:
        self.attributes: dict[str, object] = {}
        self.status: object = None

    def set_attributes(self, attributes: dict[str, object]) -> None:
        self.attributes.update(attributes)

    def set_status(self, status: object) -> None:
        self.status = status


def test_span_attributes_and_status_from_a_run_are_redacted(registered: None) -> None:
    span = _Span()
    set_run_attributes(span, {"a2e.node_id": f"n-{REQUEST_VALUE}", "a2e.attempts": 2},  # type: ignore[arg-type]
                       error=f"failed with {HOST_VALUE}")
    assert span.attributes == {"a2e.node_id": "n-«secret:REQKEY»", "a2e.attempts": 2}
    assert span.status.description == "failed with «secret:HOSTKEY»"  # type: ignore[attr-defined]
