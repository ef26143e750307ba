"""Converters from a raw configuration value (TOML, environment string or CLI value) to a
:class:`~a2e_host.config.HostConfig` field's type. Each is ``(key, raw, source) -> value``
and raises ValueError naming the key, where it came from, and what was expected.

Layer: core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "bad_value",
    "choice",
    "ceiling",
    "count",
    "flag",
    "integer",
    "optional_path",
    "optional_seconds",
    "port",
    "positive_int",
    "positive_seconds",
    "seconds",
    "string",
    "string_list",
    "table",
]


def bad_value(key: str, source: str, expected: str, raw: Any) -> ValueError:
    return ValueError(f"{key} from {source} must be {expected}, got {raw!r}")


def integer(key: str, raw: Any, source: str, expected: str) -> int:
    if isinstance(raw, bool):
        raise bad_value(key, source, expected, raw)
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        try:
            return int(raw.strip().replace("_", ""))
        except ValueError:
            pass
    raise bad_value(key, source, expected, raw)


def ceiling(key: str, raw: Any, source: str) -> int:
    value = integer(key, raw, source, "a positive integer")
    if value <= 0:
        raise bad_value(key, source, "a positive integer", raw)
    return value


def string(key: str, raw: Any, source: str) -> str:
    if not isinstance(raw, str):
        raise bad_value(key, source, "a string", raw)
    return raw


def flag(key: str, raw: Any, source: str) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(raw, str) and raw.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise bad_value(key, source, "true or false", raw)


def optional_path(key: str, raw: Any, source: str) -> str | None:
    if raw is None or raw == "":
        return None
    return string(key, raw, source)


def string_list(key: str, raw: Any, source: str) -> tuple[str, ...]:
    if isinstance(raw, str):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if isinstance(raw, list | tuple) and all(isinstance(v, str) for v in raw):
        return tuple(str(v) for v in raw)
    raise bad_value(key, source, "a list of strings (comma-separated in the environment)", raw)


def port(key: str, raw: Any, source: str) -> int:
    value = integer(key, raw, source, "an integer port 0-65535")
    if not 0 <= value <= 65535:
        raise bad_value(key, source, "an integer port 0-65535 (0 picks a free port)", raw)
    return value


def seconds(key: str, raw: Any, source: str) -> float:
    if isinstance(raw, bool):
        raise bad_value(key, source, "a number of seconds >= 0", raw)
    try:
        value = float(raw) if isinstance(raw, int | float | str) else -1.0
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise bad_value(key, source, "a number of seconds >= 0", raw)
    return value


def positive_seconds(key: str, raw: Any, source: str) -> float:
    value = seconds(key, raw, source)
    if value == 0:
        raise bad_value(key, source, "a number of seconds > 0", raw)
    return value


def optional_seconds(key: str, raw: Any, source: str) -> float | None:
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "none", "off")):
        return None
    value = seconds(key, raw, source)
    if value == 0:
        raise bad_value(key, source, "a number of seconds > 0, or none to disable", raw)
    return value


def positive_int(key: str, raw: Any, source: str) -> int:
    value = integer(key, raw, source, "a positive integer")
    if value <= 0:
        raise bad_value(key, source, "a positive integer", raw)
    return value


def count(key: str, raw: Any, source: str) -> int:
    value = integer(key, raw, source, "an integer >= 0")
    if value < 0:
        raise bad_value(key, source, "an integer >= 0", raw)
    return value


def choice(options: tuple[str, ...]) -> Callable[[str, Any, str], str]:
    def convert(key: str, raw: Any, source: str) -> str:
        value = raw.strip().lower() if isinstance(raw, str) else raw
        if value not in options:
            raise bad_value(key, source, "one of " + ", ".join(options), raw)
        return str(value)

    return convert


def table(key: str, raw: Any, source: str) -> dict[str, Any]:
    """A TOML table : a dict whose
    keys are strings; its values are left to the feature that owns the setting."""
    if isinstance(raw, dict) and all(isinstance(k, str) for k in raw):
        return dict(raw)
    raise bad_value(key, source, "a table (a [section] of the configuration file)", raw)
