"""One module per CLI command; :mod:`a2e_host.cli` only parses arguments and calls them."""
