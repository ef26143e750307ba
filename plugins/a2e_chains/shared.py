"""The parts of the chain engine one host shares between its plugins: per
:class:`~a2e_host.config.HostConfig`, one :class:`~a2e_host.chains.toolbox.Toolbox` (the
tool registry, the proc policy with its one ``max_procs`` semaphore, the skills) and one
:class:`~a2e_host.chains.step_cache.StepCache` (PROTOCOL.md §5 Recovery: one per host).

The chains plugin, the skill plugin (whose calls run through the chain engine) and the
tools plugin are built by the host with the same configuration; each asks here instead of
building its own, so ``max_procs`` and ``step_cache_max_bytes`` hold for the host and the
tool packs load once. Keyed by the configuration object (a frozen dataclass: no weak
references), forgotten when the host stops (:func:`forget_engine`).
"""

from __future__ import annotations

from a2e_host.chains.step_cache import StepCache
from a2e_host.chains.toolbox import Toolbox
from a2e_host.config import HostConfig

__all__ = ["forget_engine", "step_cache_for", "toolbox_for"]

_TOOLBOXES: dict[int, tuple[HostConfig, Toolbox]] = {}
_CACHES: dict[int, tuple[HostConfig, StepCache]] = {}


def toolbox_for(config: HostConfig) -> Toolbox:
    """The one toolbox of the host configured by ``config`` (built on first use).

    Raises:
        ValueError: as :meth:`Toolbox.from_config` (bad root, unknown pack, broken skill).
    """
    entry = _TOOLBOXES.get(id(config))
    if entry is None or entry[0] is not config:
        entry = (config, Toolbox.from_config(config))
        _TOOLBOXES[id(config)] = entry
    return entry[1]


def step_cache_for(config: HostConfig) -> StepCache:
    """The one step cache of the host configured by ``config`` (``step_cache_max_entries``
    entries, ``step_cache_max_bytes`` bytes, for every session)."""
    entry = _CACHES.get(id(config))
    if entry is None or entry[0] is not config:
        cache = StepCache(config.step_cache_max_entries, config.step_cache_max_bytes)
        entry = (config, cache)
        _CACHES[id(config)] = entry
    return entry[1]


def forget_engine(config: HostConfig) -> None:
    """The host is stopping: drop its shared toolbox and step cache (the plugins built
    with them keep theirs)."""
    for shared in (_TOOLBOXES, _CACHES):
        entry = shared.get(id(config))
        if entry is not None and entry[0] is config:
            del shared[id(config)]
