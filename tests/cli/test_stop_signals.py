"""The serving commands' signal receiver (commands/signals.py): SIGINT and SIGTERM are
received, and leaving it ignores SIGTERM without a moment at its default action (a
SIGTERM in that moment killed a closing host with status -15)."""

from __future__ import annotations

import os
import signal
from typing import Any

import anyio
import pytest

from a2e_host.commands.signals import stop_signals
from tests.support.process import WAIT


@pytest.mark.asyncio
async def test_signals_are_received_and_leaving_ignores_sigterm_in_one_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_signal = signal.signal
    sigterm_set_to: list[Any] = []

    def recording(signum: int, handler: Any) -> Any:
        if signum == signal.SIGTERM:
            sigterm_set_to.append(handler)
        return real_signal(signum, handler)

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(signal, "signal", recording)  # asyncio sets handlers through it too
    try:
        with stop_signals() as signals:
            got = []
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM):
                os.kill(os.getpid(), signum)
                with anyio.fail_after(WAIT):
                    got.append(await signals.receive())
        after = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)  # ignored now: this process goes on
    finally:
        for signum, handler in before.items():
            real_signal(signum, handler)
    assert got == [signal.SIGTERM, signal.SIGINT, signal.SIGTERM]
    assert after == (signal.SIG_IGN, signal.default_int_handler)
    # SIGTERM went from its handler straight to ignored, never back to its default
    assert len(sigterm_set_to) == 2 and callable(sigterm_set_to[0]), sigterm_set_to
    assert sigterm_set_to[1] == signal.SIG_IGN


@pytest.mark.asyncio
async def test_outside_the_main_thread_it_refuses_before_touching_any_handler() -> None:
    def in_a_thread() -> str:
        async def enter() -> None:
            with stop_signals():
                pass

        try:
            anyio.run(enter, backend="asyncio")
        except RuntimeError as exc:
            return str(exc)
        return "entered"

    before = signal.getsignal(signal.SIGTERM)
    message = await anyio.to_thread.run_sync(in_a_thread)
    assert "main thread" in message, message
    assert signal.getsignal(signal.SIGTERM) is before
