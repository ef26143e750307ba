"""Adapters that put other A2E hosts on a transport the kit speaks (see each module)."""
