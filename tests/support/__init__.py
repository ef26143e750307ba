"""What the test folders share: helpers, fakes and launchers, never tests.

- :mod:`~tests.support.process`: a host subprocess (:class:`~tests.support.process.HostProcess`),
  its environment, and its memory figures from ``/proc``.
- :mod:`~tests.support.requests`: wire messages as plain dicts (``chain/req``, tool nodes).
- :mod:`~tests.support.stdio`: the real ``a2e-host stdio``, handshaken, with its teardown.
- :mod:`~tests.support.ws`: the real ``a2e-host serve`` on 127.0.0.1, and a client's reads.
- :mod:`~tests.support.chains`: validated plans and scheduler runs for the in-process
  chain-engine tests.
- :mod:`~tests.support.dist`: a ``*.dist-info`` written as an installer leaves it, so a
  subprocess finds entry points without installing anything.
- :mod:`~tests.support.fakes`: the fake chains plugin, and a launcher serving with it.
- :mod:`~tests.support.reference_interpreter`: a sequential interpreter the scheduler is
  compared with.
- ``extra_tools_host``, ``mutant_host``, ``extensionless_host``: launchers of the real CLI
  with something patched in (``python -m tests.support.NAME …``).

Fixtures live in ``tests/conftest.py``; a test module imports from here, never from another
test module.
"""

from __future__ import annotations

from pathlib import Path

#: The repository's root: where ``pyproject.toml``, ``docs/`` and ``examples/`` are.
REPO = Path(__file__).resolve().parents[2]
