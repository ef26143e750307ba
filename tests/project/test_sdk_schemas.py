"""The SDK schemas the capability tests check against are the pinned SDK's models."""

from tests.support.sdk import SDK_COMMIT, assert_sdk_accepts, sdk_errors, sdk_model_of


def test_the_pinned_sdk_models_cover_every_tool_skill_and_proc_message() -> None:
    names = {t: sdk_model_of(t) for t in (
        "tool/list/resp", "tool/call/resp", "tool/event", "skill/discover/resp",
        "skill/call/resp", "skill/event", "proc/spawn/resp", "proc/write/resp",
        "proc/read/event", "proc/kill/resp", "proc/status/resp",
    )}
    assert names["tool/call/resp"] == "ToolCallResponse"
    assert names["skill/discover/resp"] == "SkillDiscoverResponse"
    assert names["proc/read/event"] == "ProcReadEvent"
    assert len(SDK_COMMIT) == 40


def test_a_response_missing_a_field_the_sdk_requires_is_refused() -> None:
    ok = {"type": "tool/call/resp", "id": "x", "version": "1.0", "ts": 1.0, "req_id": "r",
          "data": {"success": True, "tool_name": "t", "duration_ms": 3}}
    assert_sdk_accepts(ok)
    missing = dict(ok, data={"success": True, "tool_name": "t"})
    assert sdk_errors(missing) == ["data: 'duration_ms' is a required property"]
    assert sdk_errors({"type": "proc/status/resp", "id": "x", "req_id": "r"}) == [
        "$: 'proc_id' is a required property",
        "$: 'status' is a required property",
        "$: 'error' is a required property",
    ]
