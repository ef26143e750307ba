"""First-party tool packs of a2e-host, published through the entry-point group
``a2e_host.tools`` exactly as a third-party pack would be: ``conformance`` (PROTOCOL.md §7
fixtures), ``fs``, ``text``, ``json`` and ``bench``.
"""
