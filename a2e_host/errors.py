"""The one place exceptions become wire failures.

Layer: core (no anyio, no I/O; it logs through the logger it is given). Two shapes leave
the host when something goes wrong, and each is made here and nowhere else
(STYLE.md "Docstrings and errors"; PROTOCOL.md §2, §5):

- a wire ``error`` message, for a message the host could not accept or a bug while
  handling one: :func:`error_message_of`;
- a ``chain/resp.error`` object, for a chain that failed.

Anything that is not an :class:`~a2e_host.exceptions.A2EError` raised on purpose is a
bug: logged with its traceback, sent as ``runtime_error`` with no detail.
"""

from __future__ import annotations

from typing import Any

from .exceptions import RemoteProtocolError
from .messages import ErrorMessage

__all__ = ["error_message_of"]


def error_message_of(
    exc: BaseException,
    *,
    req_id: str,
    log: Any,
    message_type: str = "",
    capability_name: str = "",
) -> ErrorMessage:
    """The wire ``error`` for an exception raised while handling a message.

    A :class:`~a2e_host.exceptions.RemoteProtocolError` keeps its code, message, detail
    and retryable flag (its own ``req_id`` / ``capability_name`` win when set). Anything
    else is a bug: logged with its traceback and sent as ``runtime_error`` with no detail
    (PROTOCOL.md §2).

    Args:
        exc: what was raised.
        req_id: the offending message's id (``""`` if unreadable).
        log: a structlog logger (the connection's).
        message_type: its ``type``, for the runtime_error sentence.
        capability_name: the capability of the plugin that handled it, if any.

    Returns:
        The :class:`~a2e_host.messages.ErrorMessage` to send.
    """
    if isinstance(exc, RemoteProtocolError):
        own_id = getattr(exc, "req_id", None)
        log.debug("message refused", code=exc.code, req_id=own_id or req_id, error=exc.message)
        return ErrorMessage(
            req_id=own_id if isinstance(own_id, str) and own_id else req_id,
            code=exc.code,
            message=exc.message,
            detail=exc.detail,
            retryable=exc.retryable,
            capability_name=getattr(exc, "capability_name", "") or capability_name,
        )
    what = repr(message_type) if message_type else "a message"
    log.error("internal error while handling a message", req_id=req_id,
              message_type=message_type, exc_info=exc)
    return ErrorMessage(
        req_id=req_id,
        code="runtime_error",
        message=f"internal error while handling {what}; see the host log",
        capability_name=capability_name,
    )
