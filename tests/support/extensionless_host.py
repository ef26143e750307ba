"""Our host with its extensions hidden from the handshake, for proving the conformance
kit skips (never fails) what a host does not advertise.

``python -m tests.support.extensionless_host serve --port 0 --tools conformance`` starts the real
CLI, but the ``chains`` metadata (PROTOCOL.md §2) leaves out the extension features in
:data:`HIDDEN_FEATURES` and the request budgets of PROTOCOL.md §6 in
:data:`HIDDEN_CEILINGS`: to a client it looks like a host that has none of them.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from a2e_host.runtime.host import Host
from a2e_host.session import MetadataFn, Session

HIDDEN_FEATURES = ("chain/cancel", "handshake/limits", "chain/req.include_outputs",
                   "chain/req.event_outputs", "chain/node.retry", "chain/node.timeout",
                   "chain/node.fallback", "chain/cache")
HIDDEN_CEILINGS = ("max_expression_steps", "max_expression_bytes", "max_chain_output_bytes",
                   "max_total_nodes", "max_attempts")


def _hidden(metadata: MetadataFn) -> MetadataFn:
    def without_extensions(session: Session) -> dict[str, Any]:
        meta = dict(metadata(session))
        meta["features"] = [f for f in meta.get("features") or [] if f not in HIDDEN_FEATURES]
        meta["limits"] = {name: value for name, value in (meta.get("limits") or {}).items()
                          if name not in HIDDEN_CEILINGS}
        return meta

    return without_extensions


def hide_extensions() -> None:
    """Patch :meth:`Host.served_capabilities` so the ``chains`` metadata hides them."""
    original = Host.served_capabilities

    def served_capabilities(self: Host) -> Mapping[str, MetadataFn | None]:
        served = dict(original(self))
        chains = served.get("chains")
        if chains is not None:
            served["chains"] = _hidden(chains)
        return served

    Host.served_capabilities = served_capabilities  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    hide_extensions()
    from a2e_host.cli import main as cli_main

    sys.argv = ["a2e-host", *argv]
    cli_main()


if __name__ == "__main__":
    main(sys.argv[1:])
