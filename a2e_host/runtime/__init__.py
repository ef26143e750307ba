"""The runtime layer (anyio): connections, their outboxes, and the chain scheduler.

Layer: runtime. Drives the pure core (session state machine, codec, chain plan) with real
tasks; knows nothing of sockets or pipes (those are :mod:`a2e_host.transports`).
"""
