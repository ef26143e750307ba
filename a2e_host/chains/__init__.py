"""The chain engine: the ``chains`` capability's messages, validation, plan, expressions
and scheduler (seed 000; PROTOCOL.md §3–§6).

A library the ``chains`` plugin (``plugins/a2e_chains``) serves through the public plugin
API, and that clients and CLI commands use to build, check and draw chains. The host's
framework (:mod:`a2e_host.runtime`, :mod:`a2e_host.transports`, the codec and session)
never imports it: it knows chains only through the plugin.
"""
