"""A catalog whose tools declare schemas, for the static checks (PROTOCOL.md §4 static
checks): :class:`SignedCatalog` answers ``signature_of`` from a fixed table and counts
what it is asked."""

from __future__ import annotations

from collections import Counter
from typing import Any

from a2e_host.chains.catalog import Signature
from tests.support.chains import FakeCatalog


def obj(required: tuple[str, ...] = (), **props: Any) -> dict[str, Any]:
    """An object schema with ``props`` (each a JSON Schema) and the ``required`` ones."""
    return {"type": "object", "properties": props, "required": list(required)}


class SignedCatalog(FakeCatalog):
    """:class:`FakeCatalog` whose tools have the :class:`Signature` in ``signatures``
    (tools not in it declare none).

    Attributes:
        asked: how often ``signature_of`` was asked about each ``(registry, name)``.
    """

    def __init__(self, signatures: dict[str, Signature]) -> None:
        super().__init__(tools=(*signatures, "echo"), skills=())
        self.signatures = signatures
        self.asked: Counter[tuple[str, str]] = Counter()

    def signature_of(self, registry: str, name: str) -> Signature | None:
        self.asked[(registry, name)] += 1
        return self.signatures.get(name) if registry == "tool" else None
