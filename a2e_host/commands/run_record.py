"""``a2e-host run --record FILE.ndjson``: every ``chain/event`` and the ``chain/resp`` of a
run, one JSON object per line, as the host sends them.

Layer: command support (file I/O, no anyio). The file is opened once, before the chain is
sent, and written through that handle only: a line per frame, the frame's wire encoding
(:func:`~a2e_host.codec.encode_message`, byte for byte what a stdio or WebSocket client
receives), flushed as it comes, so nothing is held in memory and a run cut off leaves every
frame it received. ``a2e-host graph CHAIN --events FILE`` draws it.

An existing file is never overwritten unless asked (``--force``): opening uses
``O_CREAT | O_EXCL``; with ``--force`` an existing regular file is truncated. A symbolic
link is refused either way (``O_NOFOLLOW``), and so is anything that is not a regular file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from ..codec import encode_message
from ..messages import Message

__all__ = ["RecordFileError", "RunRecord"]


class RecordFileError(ValueError):
    """The record file cannot be created; the message names it and the fix."""


class RunRecord:
    """An open record file.

    Attributes:
        path: the file, for messages.
        lines: frames written so far.
        error: why writing stopped (a full disk …), else None; once set, later frames are
            not written.
    """

    def __init__(self, path: Path, file: BinaryIO) -> None:
        self.path = path
        self._file: BinaryIO | None = file
        self.lines = 0
        self.error: str | None = None

    @classmethod
    def create(cls, path: Path, *, force: bool = False) -> RunRecord:
        """Create (``force``: or truncate) the record file ``path``.

        Raises:
            RecordFileError: the file exists (and not ``force``), is a symbolic link, a
                directory or not a regular file, or cannot be created (its directory is
                missing or not writable).
        """
        what = f"--record file {str(path)!r}"
        flags = (os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
                 | getattr(os, "O_NOFOLLOW", 0) | (os.O_TRUNC if force else os.O_EXCL))
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            # what is there, read after the refusal, only to word the message
            mode = _lstat_mode(path)
            if mode is not None and stat.S_ISLNK(mode):
                raise RecordFileError(f"{what} is a symbolic link; name the file itself"
                                      ) from None
            if mode is not None and stat.S_ISDIR(mode):
                raise RecordFileError(f"{what} is a directory; name a file") from None
            if mode is not None and not stat.S_ISREG(mode):
                raise RecordFileError(f"{what} is not a regular file (a pipe, socket or "
                                      "device); name a file") from None
            if isinstance(exc, FileExistsError):
                raise RecordFileError(f"{what} exists; pass --force to overwrite it, or "
                                      "name another file") from None
            raise RecordFileError(f"{what} cannot be created: {exc.strerror or exc}"
                                  ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise RecordFileError(f"{what} is not a regular file (a pipe, socket or "
                                  "device); name a file")
        os.set_blocking(fd, True)
        return cls(path, os.fdopen(fd, "wb"))

    def write(self, message: Message) -> None:
        """Append ``message`` as one line and flush it. A write that fails sets
        :attr:`error` and stops the record (the run goes on); it never raises."""
        if self._file is None:
            return
        try:
            self._file.write(encode_message(message) + b"\n")
            self._file.flush()
        except OSError as exc:
            self.error = exc.strerror or str(exc)
            self.close()
            return
        self.lines += 1

    def close(self) -> None:
        """Close the file (again: nothing)."""
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError as exc:
                self.error = self.error or exc.strerror or str(exc)


def _lstat_mode(path: Path) -> int | None:
    """``path``'s mode, not following a link; None when there is nothing to stat."""
    try:
        return os.lstat(path).st_mode
    except OSError:
        return None
