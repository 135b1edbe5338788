"""The words a code is found by: those of its messages, split as the site's search splits a query.

Below both `errmap explain` (a query's words, by_words) and the docs site (a page's search tags)."""

from __future__ import annotations

import re


def regex_phrases(pattern: str) -> list[str]:
    """The runs of plain text in a regex: the words the message prints, as a log shows them.

    `out of resource: (?P<r>shared memory|\\w+),? ?Required: (?P<n>\\d+)` gives
    ["out of resource:", "shared memory", "Required"]; a character made optional is left out.
    """
    runs: list[str] = []
    cur: list[str] = []

    def flush() -> None:
        run = "".join(cur).strip()
        cur.clear()
        if len(run) >= 4 and re.search(r"[A-Za-z]{2}", run):
            runs.append(run)

    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1:i + 2]
            if nxt and not nxt.isalnum():
                cur.append(nxt)
            else:  # \w \d \s \b \n ...: a class or an assertion, not text
                flush()
            i += 2
        elif c == "[":
            flush()
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
            i += 1
        elif c == "(":
            flush()
            m = re.match(r"\(\?(?:P<\w+>|<\w+>|[:=!>]|<[=!]|[a-zA-Z]+\)|[a-zA-Z]*:)?", pattern[i:])
            i += m.end() if m else 1
        elif c in ")|^$.":
            flush()
            i += 1
        elif c in "?*+" or (c == "{" and re.match(r"\{\d+(?:,\d*)?\}", pattern[i:])):
            if cur:  # the quantifier applies to the last character alone
                cur.pop()
            flush()
            m = re.match(r"\{\d+(?:,\d*)?\}", pattern[i:]) if c == "{" else None
            i += m.end() if m else 1
        else:
            cur.append(c)
            i += 1
    flush()
    return runs


# The search plugin's separator (mkdocs.yml): queries are split into words by it, and so are these.
# Chinese punctuation and the boundary between Chinese and Latin letters or digits split words too
# (找不到prompt列: 找不到, prompt, 列); Chinese text itself is split by jieba (errmap/commands/docs.py).
SEARCH_SEPARATOR = re.compile(r"""[\s\u200b\u3000\-_,:!=\[\]()"`/'、。，：；！？（）“”]+|\.(?!\d)|&[lg]t;"""
                              r"""|(?<=[\u3400-\u9fff])(?=[A-Za-z0-9])|(?<=[A-Za-z0-9])(?=[\u3400-\u9fff])""")


def search_words(e, seen: tuple[str, ...] = (), anchors=None) -> list[str]:
    """The words of a code's messages (of `anchors`, all by default: their literals and the text
    runs of their patterns, the values the patterns list for a capture, and `seen`: what the example
    log gave its captures).

    A page's `tags` hold those of its first message (see `errno_page`). Search matches a typed word
    as a prefix, so a word that begins another (`memory`, `memoryerror`) is left out: it would count
    the same typed word twice and rank a page that holds one of the words typed above a page that
    holds them all.
    """
    words: dict[str, None] = {}
    for a in e.anchors if anchors is None else anchors:
        for phrase in [*a.literals, *filter(_telling, regex_phrases(a.regex)), *_values(a.regex), *seen]:
            for word in SEARCH_SEPARATOR.split(phrase.lower()):
                word = word.strip(EDGE + "'")
                if len(word) >= 2 and not word.isdigit():
                    words.setdefault(word, None)
    return [w for w in words if not any(o != w and o.startswith(w) for o in words)]


EDGE = " \t:;,.()[]{}<>'\"`=/-|"


_GROUP_OF_WORDS = re.compile(r"\(\?P<\w+>([\w .|-]+)\)")


def _values(pattern: str) -> list[str]:
    """The values a message's capture may take when its pattern lists them: `(?P<column>prompt|query)`."""
    return [v for m in _GROUP_OF_WORDS.finditer(pattern) for v in m[1].split("|") if re.fullmatch(r"[A-Za-z][\w .-]*", v)]


def _telling(run: str) -> bool:
    """A run that names this message rather than any error: some words, or one long identifier."""
    run = run.strip(EDGE)
    words = re.findall(r"[A-Za-z][\w.-]*", run)
    if len(words) >= 2:
        return sum(len(w) for w in words) >= 8
    return len(words) == 1 and (len(words[0]) >= 12 or "_" in words[0])
