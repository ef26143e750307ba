"""The file-system racer of case 12.8: ``python -m tests.hostile.racer DIR A:B [C:D …]``.

Swaps each pair of names under ``DIR`` as fast as it can — a real file or directory with
a symlink to outside the host's root — until a line (or EOF) arrives on stdin, then
prints how many swaps it made. Each swap is atomic (``renameat2`` with
``RENAME_EXCHANGE``), so at every instant each name is either the real entry or the
symlink: a host that checks a path and then opens it by name again can be made to open
the other one. A separate process, so the race runs truly beside the host.
"""

from __future__ import annotations

import ctypes
import os
import select
import sys

AT_FDCWD = -100
RENAME_EXCHANGE = 2

_libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: bytes, b: bytes) -> None:
    """Atomically swap the names ``a`` and ``b``.

    Raises:
        OSError: the kernel or file system cannot (``renameat2`` needs Linux ≥ 3.15).
    """
    if _libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno), a.decode())


def main(argv: list[str]) -> None:
    os.chdir(argv[0])
    pairs = [tuple(p.encode() for p in arg.split(":", 1)) for arg in argv[1:]]
    swaps = 0
    print("racing", flush=True)
    while True:
        for a, b in pairs:
            exchange(a, b)
            swaps += 1
        if swaps % 256 == 0 and select.select([sys.stdin], [], [], 0)[0]:
            break
    # leave every pair as it began (an even number of swaps per pair)
    if (swaps // len(pairs)) % 2:
        for a, b in pairs:
            exchange(a, b)
    print(swaps, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
