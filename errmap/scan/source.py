"""Sources: turn the paths a user gives into streams of byte chunks.

Plain files; gzip, bzip2, xz and zstd files, decompressed in bounded steps (a truncated or damaged
one yields what it holds, then a warning); directories (recursively, following links but entering
each folder once, each file counted once, e.g. a Ray session's logs/); globs with `**`; FIFOs and
stdin. UTF-16 and UTF-32 text (with a BOM, or ASCII-range text without one) is re-encoded as UTF-8, and Docker's
json-file logs are read as the text their records hold.
Every problem with an input is an `InputError` naming the file, never a traceback.
"""

from __future__ import annotations

import bz2
import codecs
import fnmatch
import glob
import gzip
import json
import lzma
import os
import stat
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from errmap.scan.runs import name_runs, run_of

CHUNK = 1 << 20

COMMAND_OUTPUT = "output"  # the path of `errmap run`'s output where no --log file holds it

# First bytes of each compression errmap reads, and of archives it does not open.
_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
_ARCHIVES = {b"PK\x03\x04": "a zip archive", b"7z\xbc\xaf\x27\x1c": "a 7z archive"}


class InputError(Exception):
    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def _reason(exc: OSError) -> str:
    return exc.strerror.lower() if exc.strerror else str(exc)


def _magic(head: bytes, table: dict[bytes, str]) -> str | None:
    return next((name for magic, name in table.items() if head.startswith(magic)), None)


@dataclass
class Source:
    """One input and what reading it found."""

    path: str
    bytes_read: int = 0
    lines: int = 0
    warning: str | None = None
    error: str | None = None
    run: str = ""  # the run it is a log of (runs.py); one key for the files of one run

    def chunks(self) -> Iterator[bytes | memoryview]:
        """Byte chunks of this source, each valid until the next is asked for (a plain file's are views of one
        reused buffer); raises InputError when it cannot be opened."""
        if self.path == "-":
            if sys.stdin is None:
                raise InputError("-", "stdin is closed")
            raw = _read_fd(sys.stdin.fileno(), "-")
        else:
            raw = self._read_file()
        recoder = Recoder()
        for chunk in raw:
            if out := recoder.feed(chunk):
                yield from self._count(out)
        yield from self._count(recoder.finish())
        self.warning = self.warning or recoder.warning

    def _count(self, chunk: bytes) -> Iterator[bytes]:
        if chunk:
            self.bytes_read += len(chunk)
            yield chunk

    def _read_file(self) -> Iterator[bytes]:
        try:
            f = open(self.path, "rb")
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # FIFO, character device: a stream
                with f:
                    yield from _read_fd(f.fileno(), self.path)
                return
            head = f.peek(8)[:8]
        except IsADirectoryError:
            raise InputError(self.path, "is a directory") from None
        except OSError as exc:
            raise InputError(self.path, _reason(exc)) from None
        with f:
            if archive := _magic(head, _ARCHIVES):
                raise InputError(self.path, f"is {archive}; unpack it and scan the folder")
            if kind := _magic(head, _COMPRESSED):
                yield from self._decompress(f, kind)
                return
            buf = bytearray(CHUNK)  # one buffer for the whole file: each chunk is a view of it, valid until the next
            view = memoryview(buf)
            while n := f.readinto(buf):
                yield view[:n]

    def _decompress(self, f, kind: str) -> Iterator[bytes]:
        """Inflate at most CHUNK bytes per step (a 5 GB bomb stays small); a cut file gives all it holds."""
        reader = _decompressor(self.path, f, kind)
        try:
            while chunk := reader.read1(CHUNK):
                yield chunk
        except EOFError:
            self.warning = f"{kind} data ends early (the file is truncated); read up to the break"
        except (OSError, zlib.error, lzma.LZMAError, ValueError) as exc:
            self.warning = f"{kind} data is damaged ({exc}); read up to the damage"
        except Exception as exc:  # zstandard.ZstdError
            if type(exc).__name__ != "ZstdError":
                raise
            reason = "ends early (the file is truncated)" if "incomplete" in str(exc) else f"is damaged ({exc})"
            self.warning = f"{kind} data {reason}; read up to the break"


def _decompressor(path: str, f, kind: str):
    if kind == "gzip":
        return gzip.GzipFile(fileobj=f)
    if kind == "bzip2":
        return bz2.BZ2File(f)
    if kind == "xz":
        return lzma.LZMAFile(f)
    try:  # Python 3.14 has zstd in the standard library; before it, the optional zstandard package
        from compression import zstd  # type: ignore[import-not-found]

        return zstd.ZstdFile(f)
    except ImportError:
        pass
    try:
        import zstandard
    except ImportError:
        raise InputError(path, "is zstd-compressed and no zstd decoder is installed: "
                               "pip install 'errmap[zstd]', or decompress it first (zstd -d)") from None
    return zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)


def _read_fd(fd: int, path: str) -> Iterator[bytes]:
    """Whatever a pipe holds as soon as it arrives (no waiting for a full chunk); compressed data
    on a stream is refused (it is not decompressed there) rather than scanned as noise."""
    head = b""
    while True:
        try:
            chunk = os.read(fd, CHUNK)
        except OSError as exc:
            raise InputError(path, _reason(exc)) from None
        if len(head) < 8:
            head += chunk[: 8 - len(head)]
            if kind := _magic(head, _COMPRESSED) or _magic(head, _ARCHIVES):
                raise InputError(path, f"is {kind} data on a stream; decompress it first (e.g. zcat, xzcat, zstdcat)")
        if not chunk:
            return
        yield chunk


_BOMS = [  # longest first: the UTF-32 LE BOM begins with the UTF-16 LE one
    (codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"),
]
SNIFF = 4  # bytes needed before the encoding is decided (a UTF-32 BOM)


def sniff_encoding(head: bytes) -> tuple[str | None, int]:
    """The wide encoding of text starting with `head` and the length of its BOM; (None, 0) for UTF-8.

    Without a BOM, text in the ASCII range shows its encoding by where the NUL bytes fall."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name, len(bom)
    sample = head[: 4096 - 4096 % 4]
    if len(sample) < 4:
        return None, 0

    def nul(start: int, step: int) -> float:
        part = sample[start::step]
        return part.count(0) / len(part)

    lanes = [nul(i, 4) for i in range(4)]
    if lanes[0] < 0.1 and min(lanes[1:]) > 0.9:
        return "utf-32-le", 0
    if lanes[3] < 0.1 and min(lanes[:3]) > 0.9:
        return "utf-32-be", 0
    even, odd = nul(0, 2), nul(1, 2)
    if even < 0.1 and odd > 0.5:
        return "utf-16-le", 0
    if odd < 0.1 and even > 0.5:
        return "utf-16-be", 0
    return None, 0


class Recoder:
    """Bytes in, UTF-8 bytes out: passes UTF-8 through, re-encodes UTF-16/32 (decided from the first bytes), and
    reads a Docker json-file log as its text (DockerJson)."""

    def __init__(self) -> None:
        self._head = b""
        self._decode: Callable[[bytes, bool], str] | None = None
        self._decided = False
        self._json = DockerJson()
        self.warning: str | None = None

    def feed(self, data: bytes) -> bytes:
        if self._decided:
            return self._json.feed(self._decode(data, False).encode() if self._decode else data)
        self._head += data
        if len(self._head) < SNIFF:
            return b""  # a pipe's first read can be one byte: wait for enough to see a BOM
        return self._json.feed(self._decide())

    def finish(self) -> bytes:
        out = b"" if self._decided else self._decide()
        return self._json.feed(out + (self._decode(b"", True).encode() if self._decode else b"")) + self._json.finish()

    def _decide(self) -> bytes:
        self._decided = True
        head, self._head = self._head, b""
        encoding, bom = sniff_encoding(head)
        if encoding is None:
            return head
        self._decode = codecs.getincrementaldecoder(encoding)("replace").decode
        return self._decode(head[bom:], False).encode()


# Docker's json-file logging driver (its default) writes one record a line,
# {"log":"Log line is here\n","stream":"stdout","time":"2019-01-01T11:11:11.111111111Z"}
# (docs.docker.com/engine/logging/drivers/json-file/), in /var/lib/docker/containers/<id>/<id>-json.log.
DOCKER_JSON = b'{"log":"'
MAX_RECORD = 1 << 20  # bytes of a record without its newline after which it passes through as it is


class DockerJson:
    """A log that starts with a json-file record, read as the text of its records: each line's "log" (a line that
    Docker split, without its newline, joins the next); a line that is not a record passes through."""

    def __init__(self) -> None:
        self._buf = b""
        self._on: bool | None = None  # undecided until the first line's start is seen

    def feed(self, data: bytes) -> bytes:
        if self._on is False:
            return data
        self._buf += data
        if self._on is None:
            if len(self._buf) < len(DOCKER_JSON) and b"\n" not in self._buf:
                return b""
            self._on = self._buf.startswith(DOCKER_JSON)
            if not self._on:
                out, self._buf = self._buf, b""
                return out
        end = self._buf.rfind(b"\n") + 1
        if not end and len(self._buf) <= MAX_RECORD:
            return b""
        cut = end or len(self._buf)
        lines, self._buf = self._buf[:cut], self._buf[cut:]
        return _records(lines)

    def finish(self) -> bytes:
        out, self._buf = self._buf, b""
        return _records(out + b"\n") if self._on and out else out  # the last record may lack its newline


def _records(lines: bytes) -> bytes:
    *whole, rest = lines.split(b"\n")
    return b"".join(_record(line) for line in whole) + rest


def _record(line: bytes) -> bytes:
    if line.startswith(DOCKER_JSON):
        try:
            record = json.loads(line)
        except ValueError:  # not JSON after all, or not UTF-8
            record = None
        if isinstance(record, dict) and isinstance(record.get("log"), str):
            return record["log"].encode("utf-8", "replace")
    return line + b"\n"


@dataclass
class Expanded:
    sources: list[Source] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)


def _ident(st: os.stat_result) -> int:
    """Device and inode as one number: a set of a million of them stays small."""
    return st.st_dev << 64 | st.st_ino


def _file_id(path: str) -> int | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _ident(st) if stat.S_ISREG(st.st_mode) else None


def _walk(root: str, errors: list[InputError], hidden: bool = True) -> Iterator[str]:
    """Every file under `root`, without recursion (any depth), following links to folders but
    entering each folder once (a link loop ends); a folder that cannot be read is an error. Each
    folder is read as it is walked, never held whole."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            ident = _ident(os.stat(folder))
            if ident in seen:
                continue
            seen.add(ident)
            with os.scandir(folder) as entries:
                for entry in entries:
                    if not hidden and entry.name.startswith("."):
                        continue
                    try:
                        if entry.is_dir():
                            stack.append(entry.path)
                        elif entry.is_file():
                            yield entry.path
                    except OSError:
                        continue  # a dangling link: nothing to read
        except OSError as exc:
            errors.append(InputError(folder, _reason(exc)))


def _glob_root(pattern: str) -> tuple[str, list[str]]:
    """The folder before the first wildcard ("" for the current one), and the parts after it."""
    parts = pattern.split(os.sep)
    i = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    root = os.sep.join(parts[:i])
    return (os.sep if not root and pattern.startswith(os.sep) else root), parts[i:]


def _closure(states: set[int], pats: list[str]) -> set[int]:
    out, todo = set(), list(states)
    while todo:
        s = todo.pop()
        if s not in out:
            out.add(s)
            if s < len(pats) and pats[s] == "**":
                todo.append(s + 1)  # ** may stand for no folder at all
    return out


def _match(parts: list[str], pats: list[str]) -> bool:
    """Path parts against glob parts, `**` standing for any number of (not hidden) folders."""
    states = _closure({0}, pats)
    for part in parts:
        nxt = set()
        for s in states:
            if s == len(pats):
                continue
            if pats[s] == "**":
                if not part.startswith("."):
                    nxt.add(s)
            elif (not part.startswith(".") or pats[s].startswith(".")) and fnmatch.fnmatchcase(part, pats[s]):
                nxt.add(s + 1)
        states = _closure(nxt, pats)
    return len(pats) in states


def _glob(pattern: str, errors: list[InputError]) -> list[str]:
    """glob.glob, except that `**` walks each folder once (glob.glob loops on a link to a parent)."""
    if "**" not in pattern:
        return glob.glob(pattern)
    root, pats = _glob_root(pattern)
    found = []
    for path in _walk(root or os.curdir, errors, hidden=False):
        rel = os.path.relpath(path, root or os.curdir)
        if _match(rel.split(os.sep), pats):
            found.append(path if root else rel)
    return found


def expand(paths: list[str]) -> Expanded:
    """Files as given; directories walked and unmatched globs expanded, sorted, each file once."""
    out = Expanded()
    seen: set[int] = set()

    def add_found(files: Iterable[str], given: str) -> None:
        for f in sorted(files):
            ident = _file_id(f)
            if ident is not None and ident not in seen:
                seen.add(ident)
                out.sources.append(Source(f, run=run_of(f, given)))

    for p in paths:
        if p == "-":
            out.sources.append(Source("-"))
        elif os.path.isdir(p):
            before = len(out.sources)
            add_found(_walk(p, out.errors), p)
            if len(out.sources) == before and not out.errors:
                out.errors.append(InputError(p, "directory holds no files"))
        elif not os.path.lexists(p) and glob.has_magic(p):
            before = len(out.sources)
            add_found(_glob(p, out.errors), p)
            if len(out.sources) == before:
                out.errors.append(InputError(p, "no file matches this pattern"))
        else:
            out.sources.append(Source(p, run=run_of(p)))
    name_runs(out.sources)
    return out
