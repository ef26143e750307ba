"""Check messages against the public A2E SDK's models (JSON Schemas derived from its
pydantic models, pinned commit: ``tests/support/sdk_schemas/README.md``)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

__all__ = [
    "SDK_COMMIT", "sdk_model_of", "assert_sdk_accepts", "assert_sdk_model_accepts", "sdk_errors",
]

SDK_COMMIT = "c8fc1f87000f02a27c98f5700f3f62b6fc4e3ba7"
_DIR = Path(__file__).parent / "sdk_schemas"


@functools.cache
def _schemas() -> dict[str, dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for name in ("base", "tools", "skills", "proc", "mcp"):
        merged.update(json.loads((_DIR / f"{name}.json").read_text()))
    return merged


def sdk_model_of(message_type: str) -> str:
    """The SDK model class name for a message ``type`` (KeyError when it has none)."""
    return str(_schemas()[message_type]["model"])


def sdk_errors(message: dict[str, Any]) -> list[str]:
    """Every reason the SDK's model for ``message["type"]`` would refuse ``message``
    (empty: it decodes), each as ``path: message``."""
    schema = _schemas()[message["type"]]["schema"]
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'/'.join(str(p) for p in err.absolute_path) or '$'}: {err.message}"
        for err in validator.iter_errors(message)
    ]


def assert_sdk_accepts(message: dict[str, Any]) -> None:
    """Fail unless the SDK's model for ``message["type"]`` decodes ``message``."""
    errors = sdk_errors(message)
    model = sdk_model_of(message["type"])
    assert not errors, f"the SDK's {model} refuses {message['type']}: {errors}"


def assert_sdk_model_accepts(model: str, value: dict[str, Any]) -> None:
    """Fail unless the SDK's model class ``model`` (one kept by class name, e.g.
    ``MCPServerInfo``) decodes ``value``."""
    schema = _schemas()[model]["schema"]
    errors = [f"{'/'.join(str(p) for p in err.absolute_path) or '$'}: {err.message}"
              for err in jsonschema.Draft202012Validator(schema).iter_errors(value)]
    assert not errors, f"the SDK's {model} refuses {value}: {errors}"
