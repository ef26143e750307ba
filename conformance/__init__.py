"""A2E chains conformance kit: requirement-driven wire-protocol cases for any host.

Host-agnostic: it speaks only the wire protocol (seed chain/* contract and
PROTOCOL.md) over stdio or WebSocket, and never imports a host implementation.

Modules, bottom up:

* :mod:`conformance.matchers` — the matcher language for expected values (pure).
* :mod:`conformance.templates` — templates for sent values (pure).
* :mod:`conformance.cases` — loading ``cases/*.jsonl`` transcripts (pure).
* :mod:`conformance.manifest` — ``requirements.json`` and coverage (pure).
* :mod:`conformance.invariants` — per-request chain transcript checks (pure).
* :mod:`conformance.results` — a case's result and the failure a step raises (pure).
* :mod:`conformance.transports` — stdio and WebSocket clients (asyncio).
* :mod:`conformance.runner` — one case over one connection or a shared session (asyncio).
* :mod:`conformance.suite` — probe, gating, scheduling, shared sessions (asyncio).
* :mod:`conformance.report`, :mod:`conformance.cli` (the ``a2e-conformance`` command),
  :mod:`conformance.pytest_plugin`.
* :mod:`conformance.adapters` — put other hosts on a transport the kit speaks (the public
  SDK's host: ``a2e_sdk_stdio``; standard library only, run under that host's Python).
"""

__version__ = "0.1.0"
