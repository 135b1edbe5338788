"""The cache of what errmap builds from a KB (its validated entries, the superset table, Hyperscan databases):
files in one folder (ERRMAP_CACHE_DIR, else $XDG_CACHE_HOME/errmap, else ~/.cache/errmap) that only the user
running errmap may write, each bound to what it was built from.

Whoever can write the folder could plant a file that errmap trusts (a fix step of their own, a database for
Hyperscan to load) or a link that makes errmap overwrite a file of the user's. So a folder or a file that
another user owns, or that the group or others may write, is not used (said once, on stderr), and errmap works
without it. A file is created under a random name with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, then renamed into
place, so a reader never sees half of one and no link is followed. Its first line holds the whole key it was
built for (a hash of the KB files' bytes and of the code that reads them), checked on every read.
"""

from __future__ import annotations

import os
import secrets
import stat
import sys
from pathlib import Path

MAGIC = b"errmap-cache "
_O_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_O_FILE = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_O_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_said = False  # the refusal is said once per run


def folder() -> Path:
    return Path(os.environ.get("ERRMAP_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "errmap"
    ))


def _refuse(path: str | Path, st: os.stat_result) -> None:
    global _said
    if not _said:
        from errmap.report.i18n import _
        from errmap.report.inert import literal

        _said = True
        print("errmap: " + _("{path} may be written by another user (owner uid {uid}, mode {mode}); errmap works without "
                             "the cache there").format(path=literal(str(path)), uid=st.st_uid, mode=f"{stat.S_IMODE(st.st_mode):04o}"),
              file=sys.stderr)


def _mine(path: str | Path, st: os.stat_result) -> bool:
    """Whether only this user may write what `st` describes; said once when not."""
    if st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return True
    _refuse(path, st)
    return False


def _open(create: bool) -> int | None:
    """The cache folder, open, when it is only this user's; None otherwise (created 0700 with `create`)."""
    path = folder()
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
        fd = os.open(path, _O_DIR)
    except OSError:  # none yet, or a read-only home: no cache
        return None
    if _mine(path, os.fstat(fd)):
        return fd
    os.close(fd)
    return None


def _name(kind: str, key: str, ext: str) -> str:
    return f"{kind}-{key[:24]}{ext}"


def read(kind: str, key: str, ext: str = ".json") -> bytes | None:
    """The bytes cached for `key` (a hex digest of what they were built from); None when absent, foreign or stale."""
    fd = _open(create=False)
    if fd is None:
        return None
    try:
        f = os.open(_name(kind, key, ext), _O_FILE, dir_fd=fd)
    except OSError:  # absent, or a link
        return None
    finally:
        os.close(fd)
    with os.fdopen(f, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or not _mine(folder() / _name(kind, key, ext), st):
            return None
        data = fh.read()
    head, _, body = data.partition(b"\n")
    return body if head == MAGIC + key.encode() else None


def write(kind: str, key: str, data: bytes, ext: str = ".json", keep: int | None = None) -> None:
    """Cache `data` for `key`, whole or not at all; with `keep`, only the `keep` newest files of this kind stay.
    Where the folder cannot be written or is not only this user's, nothing is cached."""
    fd = _open(create=True)
    if fd is None:
        return
    tmp = f".{kind}-{secrets.token_hex(8)}.tmp"
    try:
        f = os.open(tmp, _O_NEW, 0o600, dir_fd=fd)
        try:
            with os.fdopen(f, "wb") as fh:
                fh.write(MAGIC + key.encode() + b"\n" + data)
            os.replace(tmp, _name(kind, key, ext), src_dir_fd=fd, dst_dir_fd=fd)
        except OSError:
            os.unlink(tmp, dir_fd=fd)
            raise
        if keep is not None:
            _prune(fd, kind, ext, keep)
    except OSError:  # a full disk: run without a cache
        pass
    finally:
        os.close(fd)


def _prune(fd: int, kind: str, ext: str, keep: int) -> None:
    """Remove all but the `keep` newest files of `kind` in the folder open at `fd`."""
    found = []
    with os.scandir(fd) as entries:
        for e in entries:
            if e.name.startswith(f"{kind}-") and e.name.endswith(ext):
                try:
                    found.append((e.stat(follow_symlinks=False).st_mtime_ns, e.name))
                except OSError:
                    continue
    for _, name in sorted(found, reverse=True)[keep:]:
        try:
            os.unlink(name, dir_fd=fd)
        except OSError:
            pass
