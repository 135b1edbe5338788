"""`--report FILE`: the report written whole or not at all.

The text goes to a new file beside FILE (a random name, O_EXCL) that is then renamed onto it, so a failure
(a full disk, a name the encoding refuses) leaves FILE as it was, and two runs writing one FILE at once leave
one whole report, never the two mixed. FILE keeps its mode; a link is written through to the file it names;
what is no regular file (a FIFO, /dev/stdout, /dev/null) is written in place, as it cannot be replaced.
"""

from __future__ import annotations

import os
import stat
import tempfile


def save(path: str, text: str) -> None:
    """Write `text` (UTF-8; a lone surrogate, which the formats escape already, as `\\udcff`) to `path` whole;
    raise OSError (nothing changed) when it cannot be."""
    data = text.encode("utf-8", "backslashreplace")
    target = os.path.realpath(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(target, "wb") as f:
            f.write(data)
        return
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target) or ".", prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode) if st else 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
