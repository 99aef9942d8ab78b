"""Input files are regular files: a FIFO, a device or a socket given where a file is
read (or a trace written) would block forever (`mkfifo`, `<(cmd)`) or never end
(`/dev/zero`), so it is refused before anything opens it.

    problem = not_regular(Path("/dev/zero"))   # "is a character device, not a regular file"
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["not_regular"]

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def not_regular(path: Path | str) -> str | None:
    """Why `path` (symlinks followed) cannot be read as a file: "is a FIFO (named pipe),
    not a regular file" and the like; None for a regular file or a path that does not
    exist (the caller's open reports that). Never opens it, so never blocks."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, kind in _KINDS:
        if test(mode):
            return f"is {kind}, not a regular file"
    return None if stat.S_ISREG(mode) else "is not a regular file"
