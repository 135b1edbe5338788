"""A byte-level superset of a `regex` pattern, for Hyperscan to run over a log's raw bytes.

`superset(pattern)` rewrites a pattern written for decoded text (Python `regex` syntax) into one over
UTF-8 bytes that matches, inside the same line, wherever the original matches a line's text: anchors
(`^`, `$`, `\\b`) and lookarounds are dropped, a back-reference becomes any run of the line, every
element that can match a non-ASCII character also takes any 1-4 bytes of 0x80-0xFF (a UTF-8
sequence, or an invalid byte that decodes to U+FFFD), and case-insensitive letters widen the same
way (the Kelvin sign matches `k`). What comes before a pattern's first literal character is dropped
(Hyperscan runs fastest from a literal) and what it ends with is cut back to its first byte (`\\w+` at
the end becomes one byte), so each line reports one end per occurrence, not one per byte. The result
never matches a line break, so a match ends in the line it belongs to. None when no safe superset
exists (a pattern that would match the empty string): that anchor keeps its literals.
"""

from __future__ import annotations

import re
import re._constants as c
import re._parser as sre

import regex

HIGH = range(0x80, 0x100)
ASCII = frozenset(range(0x80)) - {0x0A, 0x0D}  # a line's text holds no line break
COARSE = 1 << 30  # a flag of ours: a character that may be non-ASCII is any run of its bytes, bounds dropped
MAX_COUNT = 64  # larger repeat bounds become unbounded (a superset, and cheap for Hyperscan)
_GROUP_NAME = regex.compile(r"\(\?P<(\w+)>")
_CATEGORIES = {
    c.CATEGORY_DIGIT: r"\d", c.CATEGORY_NOT_DIGIT: r"\D", c.CATEGORY_SPACE: r"\s",
    c.CATEGORY_NOT_SPACE: r"\S", c.CATEGORY_WORD: r"\w", c.CATEGORY_NOT_WORD: r"\W",
}
# The ASCII members of each class escape, as the `regex` module (which runs the anchors) has them.
_ASCII_OF = {cat: frozenset(b for b in ASCII if regex.match(esc, chr(b))) for cat, esc in _CATEGORIES.items()}


class Unsupported(ValueError):
    pass


def superset(pattern: str, after: str | None = None) -> bytes | None:
    """The Hyperscan pattern (bytes) for `pattern`, or None where it would match empty. With `after`, `pattern` is
    kept whole and runs only where a match of `after` from a line's start can end (`after` widened coarsely: any
    character that may be non-ASCII becomes any run of bytes, bounds dropped, so Hyperscan takes it)."""
    tree = _parse(pattern)
    items = list(tree)
    if _nullable(items):
        return None
    if after is not None:  # what precedes, coarsely (every character run unbounded), from the line's start
        before = _parse(after)
        lead = _seq(list(before), before.state.flags | COARSE, last=False)
        return f"(?:^|\\x0a)(?:{lead})".encode("latin-1") + _seq(items, tree.state.flags, last=True).encode("latin-1")
    lead = _lead(items, tree.state.flags)
    return _seq(lead if not _nullable(lead) else items, tree.state.flags, last=True).encode("latin-1")


def _parse(pattern: str):
    try:
        return sre.parse(_unique_names(pattern))
    except (re.error, OverflowError, RecursionError) as exc:
        raise Unsupported(str(exc)) from None


def _lead(items, flags) -> list:
    """`items` from their first literal character on (per alternative): a match of the rest ends where the whole's
    does, and Hyperscan runs fastest from a literal (a leading `[\\w.]+: ` would run on every byte)."""
    while items:
        op, av = items[0]
        if op is c.LITERAL and not (flags & c.SRE_FLAG_IGNORECASE and chr(av).isalpha()):
            return items
        if op is c.SUBPATTERN and not av[1] and not av[2]:
            inner = _lead(list(av[3]), flags)
            return ([(c.SUBPATTERN, (av[0], 0, 0, inner))] if inner else []) + items[1:]
        if op is c.BRANCH:
            return [(c.BRANCH, (None, [_lead(list(alt), flags) for alt in av[1]]))] + items[1:]
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT) and av[0] >= 1 and not _unit_body(av[2]):
            return items  # a repeated group: kept whole
        items = items[1:]  # a class, an optional part, an anchor or a lookaround
    return items


def _unit_body(body) -> bool:
    body = list(body)
    return len(body) == 1 and body[0][0] in _UNITS


def _unique_names(pattern: str) -> str:
    """`regex` allows a group name in several branches; the `re` parser does not (the names are unused here)."""
    seen: dict[str, int] = {}

    def rename(m: regex.Match[str]) -> str:
        n = seen[m[1]] = seen.get(m[1], -1) + 1
        return m[0] if n == 0 else f"(?P<{m[1]}__{n}>"

    return _GROUP_NAME.sub(rename, pattern)


def _nullable(items) -> bool:
    return all(_nullable_item(op, av) for op, av in items)


def _nullable_item(op, av) -> bool:
    if op in (c.AT, c.ASSERT, c.ASSERT_NOT, c.GROUPREF):
        return True
    if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
        return av[0] == 0 or _nullable(av[2])
    if op is c.SUBPATTERN:
        return _nullable(av[3])
    if op is c.ATOMIC_GROUP:
        return _nullable(av)
    if op is c.BRANCH:
        return any(_nullable(alt) for alt in av[1])
    if op is c.GROUPREF_EXISTS:
        return _nullable(av[1]) or av[2] is None or _nullable(av[2])
    return False


def _class(members: frozenset[int] | set[int]) -> str:
    if not members:
        raise Unsupported("empty class")
    runs: list[list[int]] = []
    for b in sorted(members):
        if runs and runs[-1][1] == b - 1:
            runs[-1][1] = b
        else:
            runs.append([b, b])
    if runs == [[runs[0][0], runs[0][0]]]:
        return f"\\x{runs[0][0]:02x}"
    return "[" + "".join(f"\\x{lo:02x}" if lo == hi else f"\\x{lo:02x}-\\x{hi:02x}" for lo, hi in runs) + "]"


def _unit(op, av, flags) -> tuple[frozenset[int], bool, bytes | None]:
    """One character's match: (ASCII bytes, whether non-ASCII characters match too, exact bytes of a non-ASCII literal)."""
    caseless = bool(flags & c.SRE_FLAG_IGNORECASE)
    if op is c.LITERAL:
        if av < 0x80:
            members = {av} & ASCII
            if caseless and chr(av).isalpha():
                return frozenset({ord(chr(av).lower()), ord(chr(av).upper())}), True, None
            return frozenset(members), False, None
        if caseless or av == 0xFFFD:
            return frozenset(), True, None
        return frozenset(), False, chr(av).encode()
    if op is c.NOT_LITERAL:
        out = set(ASCII) - {av}
        if caseless and av < 0x80:
            out -= {ord(chr(av).lower()), ord(chr(av).upper())}
        return frozenset(out), True, None
    if op is c.ANY:
        return ASCII, True, None
    if op is c.IN:
        members: set[int] = set()
        wide = negate = False
        for iop, iav in av:
            if iop is c.NEGATE:
                negate = True
            elif iop is c.LITERAL:
                members |= {iav} if iav < 0x80 else set()
                wide |= iav >= 0x80
            elif iop is c.RANGE:
                lo, hi = iav
                members |= set(range(lo, min(hi, 0x7F) + 1))
                wide |= hi >= 0x80
            elif iop is c.CATEGORY:
                members |= _ASCII_OF[iav]
                wide = True  # every class escape takes some non-ASCII characters
            else:
                raise Unsupported(f"class item {iop}")
        if caseless:
            letters = {b for b in members if chr(b).isalpha()}
            members |= {ord(chr(b).swapcase()) for b in letters}
            wide |= bool(letters)
        if negate:
            members = set(range(0x80)) - members
            wide = True
        return frozenset(members & ASCII), wide, None
    raise Unsupported(f"not a character: {op}")


_UNITS = (c.LITERAL, c.NOT_LITERAL, c.ANY, c.IN)


def _emit_unit(op, av, flags, last: bool) -> str:
    members, wide, exact = _unit(op, av, flags)
    if exact is not None:
        return _class({exact[0]}) if last else "".join(f"\\x{b:02x}" for b in exact)
    if not wide:
        return _class(members)
    if last:  # a character's first byte is enough for a match that may end there
        return _class(members | set(HIGH))
    if flags & COARSE:
        return _class(members | set(HIGH)) + "+"
    high = "[\\x80-\\xff]{1,4}"
    return f"(?:{_class(members)}|{high})" if members else high


def _count(n: int) -> str:
    return "" if n is None else str(n)


def _repeat(lo: int, hi: int) -> str:
    unbounded = hi == c.MAXREPEAT or hi > MAX_COUNT
    if unbounded:
        return "*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}"
    if lo == hi:
        return "" if lo == 1 else f"{{{lo}}}"
    return "?" if (lo, hi) == (0, 1) else f"{{{lo},{hi}}}"


def _seq(items, flags, last: bool) -> str:
    if last:  # what may match empty at the end adds nothing to where a match can end
        while items and _nullable_item(*items[-1]):
            items = items[:-1]
    out = []
    for k, (op, av) in enumerate(items):
        out.append(_item(op, av, flags, last and k == len(items) - 1))
    return "".join(out)


def _item(op, av, flags, last: bool) -> str:
    if op in _UNITS:
        return _emit_unit(op, av, flags, last)
    if op in (c.AT, c.ASSERT, c.ASSERT_NOT):
        return ""  # anchors and lookarounds: dropped, a superset
    if op is c.GROUPREF:
        return "[^\\n\\r]*"
    if op is c.SUBPATTERN:
        _group, add, remove, body = av
        return "(?:" + _seq(list(body), (flags | add) & ~remove, last) + ")"
    if op is c.ATOMIC_GROUP:
        return "(?:" + _seq(list(av), flags, last) + ")"
    if op is c.BRANCH:
        return "(?:" + "|".join(_seq(list(alt), flags, last) for alt in av[1]) + ")"
    if op is c.GROUPREF_EXISTS:
        _group, yes, no = av
        alts = [_seq(list(yes), flags, last), _seq(list(no), flags, last) if no is not None else ""]
        return "(?:" + "|".join(alts) + ")" if all(alts) else "(?:" + (alts[0] or alts[1]) + ")?"
    if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
        lo, hi, body = av
        body = list(body)
        if len(body) == 1 and body[0][0] in _UNITS:
            members, wide, exact = _unit(*body[0], flags)
            if exact is None:
                members = members | set(HIGH) if wide else members
                if last:  # the first `lo` bytes of the run: one end
                    return _class(members) + _repeat(lo, lo)
                scale = 4 if wide else 1
                if wide and flags & COARSE:
                    return _class(members) + _repeat(lo, c.MAXREPEAT)
                return _class(members) + _repeat(lo, hi if hi == c.MAXREPEAT else hi * scale)
        inner = _seq(body, flags, False)
        if last:
            tail = _seq(body, flags, True)
            return (f"(?:{inner}){_repeat(lo - 1, lo - 1)}" if lo > 1 else "") + f"(?:{tail})"
        return f"(?:{inner}){_repeat(lo, hi)}"
    raise Unsupported(f"operator {op}")


DIGITS = range(0x30, 0x3A)


def digit_blind(pattern: str) -> bool:
    """Whether `pattern` cannot tell one ASCII digit from another: every literal, class and range takes all ten or none
    (`\\d`, `\\w`, `[!-~]`), and a back-reference only repeats a group that holds no digit (a quote). Then it matches a
    text exactly where it matches that text with any of its ASCII digits changed. False where unsure (`re` cannot
    parse it, or a construct not named here)."""
    try:
        items = list(_parse(pattern))
        groups: dict[int, list] = {}
        _groups(items, groups)
        return _blind(items, groups)
    except Unsupported:
        return False


def _groups(items, out: dict[int, list]) -> None:
    """Each numbered group's sequence, for the back-references."""
    for op, av in items:
        if op is c.SUBPATTERN and av[0] is not None:
            out[av[0]] = list(av[3])
        if op not in _UNITS and op is not c.AT and op is not c.GROUPREF:
            for body in _bodies(op, av):
                _groups(body, out)


def _blind(items, groups: dict[int, list]) -> bool:
    for op, av in items:
        if op in _UNITS:
            if op in (c.LITERAL, c.NOT_LITERAL) and av in DIGITS:
                return False
            if op is c.IN:
                for iop, iav in av:
                    if iop in (c.LITERAL, c.NOT_LITERAL) and iav in DIGITS or iop is c.RANGE and \
                            0 < min(iav[1], DIGITS[-1]) - max(iav[0], DIGITS[0]) + 1 < len(DIGITS):
                        return False  # a digit, or a range over part of 0-9
                    if iop not in (c.LITERAL, c.NOT_LITERAL, c.RANGE, c.CATEGORY, c.NEGATE):
                        return False
        elif op is c.GROUPREF:
            if _may_digit(groups.get(av, [(c.ANY, None)])):
                return False
        elif op is not c.AT and not all(_blind(body, groups) for body in _bodies(op, av)):
            return False
    return True


def _bodies(op, av) -> list:
    """The sequences inside a group, an alternation, a repeat or a lookaround; a construct not named here: unsure."""
    if op is c.SUBPATTERN:
        return [av[3]]
    if op is c.BRANCH:
        return list(av[1])
    if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
        return [av[2]]
    if op is c.ATOMIC_GROUP:
        return [av]
    if op in (c.ASSERT, c.ASSERT_NOT):
        return [av[1]]
    return [[(c.GROUPREF, -1)]]  # read as a back-reference to an unknown group: not blind


def _may_digit(items) -> bool:
    """Whether a sequence may match an ASCII digit."""
    for op, av in items:
        if op in _UNITS:
            if op is not c.LITERAL and op is not c.IN or _unit(op, av, 0)[0] & set(DIGITS):
                return True
        elif op is c.GROUPREF or op is not c.AT and any(_may_digit(body) for body in _bodies(op, av)):
            return True
    return False
