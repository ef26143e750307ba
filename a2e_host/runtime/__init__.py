"""The runtime layer (anyio): the host, its runs, and the connections it serves.

Layer: runtime. Drives the pure core (session state machine, codec) with real tasks;
knows nothing of sockets or pipes (those are :mod:`a2e_host.transports`).

- :mod:`.host`: :class:`~a2e_host.runtime.host.Host`, plugins, the handler transports serve;
- :mod:`.router`: what a connection may use of its host (frozen);
- :mod:`.runs`: the host's runs (chains): tasks, sinks, attach and detach;
- :mod:`.connection`: one connection's tasks and how it ends;
- :mod:`.decode`: one frame → one message, within the size cap;
- :mod:`.dispatch`: core messages answered, the rest routed to plugins;
- :mod:`.context`: a plugin's view of the connection for one message;
- :mod:`.outbox`: the outgoing frame queue with its high-water mark;
- :mod:`.memory`: a message-level in-process client of a host;
- :mod:`.limiters`: per-loop thread limiters.
"""
