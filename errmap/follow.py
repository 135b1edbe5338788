"""Following a file like `tail -F`: wait for it, hold partial lines, survive rotation and truncation.

Rotation (rename + new file) finishes the old file first, then starts the new one at line 1;
truncation (copytruncate) starts again at the top with a notice. Each generation of the file gets
its own scanner, so line numbers always match the file as it is on disk.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from errmap.matcher import Matcher
from errmap.scan import OnNew, feed
from errmap.source import CHUNK, InputError
from errmap.triage import Triage

POLL = 0.1  # seconds between checks when the file has no new data


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def follow_into(
    matcher: Matcher,
    path: str,
    triage: Triage,
    on_new: OnNew,
    notice: Callable[[str], None],
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """Feed `path` into `triage` until `stop()` is true or the process is interrupted."""
    if os.path.isdir(path):
        raise InputError(path, "is a directory")
    waited = False
    while not stop():
        ident = _identity(path)
        if ident is None:
            if not waited:
                notice(f"waiting for {path} to appear")
                waited = True
            time.sleep(POLL)
            continue
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            continue  # rotated away between stat and open
        except OSError as exc:
            raise InputError(path, exc.strerror.lower() if exc.strerror else str(exc)) from None
        ident = os.fstat(f.fileno()).st_dev, os.fstat(f.fileno()).st_ino
        scanner = matcher.scanner(path)
        with f:
            while not stop():
                chunk = f.read(CHUNK)
                if chunk:
                    feed(triage, scanner.feed(chunk), on_new)
                    continue
                current = _identity(path)
                if current != ident:
                    # Rotated or removed: drain what was written before the switch, then reopen.
                    while chunk := f.read(CHUNK):
                        feed(triage, scanner.feed(chunk), on_new)
                    feed(triage, scanner.finish(), on_new)
                    if current is not None:
                        notice(f"{path} was rotated; following the new file")
                    break
                if os.fstat(f.fileno()).st_size < f.tell():
                    feed(triage, scanner.finish(), on_new)
                    notice(f"{path} was truncated; reading again from the top")
                    f.seek(0)
                    scanner = matcher.scanner(path)
                    continue
                time.sleep(POLL)
            else:
                feed(triage, scanner.finish(), on_new)
