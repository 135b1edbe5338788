"""The docs site: one page per errno, generated from kb/ when the site is built.

This file is also the MkDocs hook named in mkdocs.yml: `on_config` puts the codes into the
navigation and `on_files` adds the generated pages (errno/index.md, errno/<n>/index.md), so
`mkdocs build --strict` and `errmap docs build` give the same site and no page is written by hand.
The sections of a page are errmap/commands/sections.py's `HEADINGS`, filled by the same helpers as `errmap explain`.

Everything taken from a KB entry or a log is HTML-escaped, and the characters Markdown would read
as markup become character references, so a log line prints as written and never as markup.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

from errmap.commands.search import search_words

CONFIG = "mkdocs.yml"
CONFIG_ZH = "mkdocs.zh.yml"
ROLE = {"root": "root cause", "consequence": "consequence"}
PHONE_BEFORE, PHONE_AFTER = 3, 1  # lines around the matched one that a phone-width page shows
# HTML's special characters and Markdown's markup characters, as character references.
_ESC = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}
_ESC.update({c: f"&#{ord(c)};" for c in "\\`*_[]{}|#+-!~"})
_CODE_SPAN = re.compile(r"(`[^`]+`)")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_HAN_RUN = re.compile(r"[\u3400-\u9fff]+")  # as the search separator (mkdocs.yml) tells Chinese from Latin


def checkout() -> Path:
    """The folder holding mkdocs.yml, docs/ and kb/: the checkout errmap runs from."""
    root = Path(__file__).resolve().parents[2]
    if not (root / CONFIG).is_file():
        raise FileNotFoundError(f"{root / CONFIG} not found: the docs site is built from a checkout of errmap")
    return root


def page_uri(errno: int) -> str:
    """The source path of a code's page; it is served as /errno/<n>/ and never moves."""
    return f"errno/{errno}/index.md"


# ---------------------------------------------------------------- escaping


def text(value: str) -> str:
    """Plain text for a Markdown line: HTML-escaped, Markdown markup characters as references."""
    return "".join(_ESC.get(c, c) for c in value)


def _code(value: str) -> str:
    """Code; a long name may break after . _ = / so that it wraps on a phone."""
    body = text(value)
    if len(value) > 24:
        body = re.sub(r"(\.|&#95;|(?<![=!;])=(?!=)|/)", r"\1<wbr>", body)  # never inside ==, <=, >=, !=
    return f"<code>{body}</code>"


def prose(value: str, names: set[str] | None = None) -> str:
    """KB prose for a page: `code` spans become <code>, {capture} placeholders show as <capture>."""
    from errmap.kb.model import OPTIONAL

    names = names or set()
    value = OPTIONAL.sub("", value)  # a page shows the template: the fragments that one log fills in are left out

    def holes(part: str) -> str:
        out, last = [], 0
        for m in _PLACEHOLDER.finditer(part):
            out.append(text(part[last:m.start()]))
            out.append(f"<var>&lt;{m[1]}&gt;</var>" if m[1] in names else text(m[0]))
            last = m.end()
        return "".join(out) + text(part[last:])

    pieces = []
    for part in _CODE_SPAN.split(value):
        if part.startswith("`") and part.endswith("`") and len(part) > 2:
            pieces.append(_code(_PLACEHOLDER.sub(lambda m: f"<{m[1]}>" if m[1] in names else m[0], part[1:-1])))
        else:
            pieces.append(holes(part))
    return "".join(pieces)


def _link(url: str, label: str) -> str:
    return f'<a href="{html.escape(url, quote=True)}">{text(label)}</a>'


def _source(value: str) -> str:
    """An anchor's source: a link when it is a URL, else the words as code."""
    if re.fullmatch(r"https://\S+", value):
        return _link(value, value)
    return prose(value)


# ---------------------------------------------------------------- pages


def example_html(example) -> str:
    """The example log as a raw HTML block, the matching line marked."""
    from errmap.commands.sections import Example
    from errmap.report.i18n import _
    from errmap.report.text import lead

    assert isinstance(example, Example)
    rows = []
    for n, line in example.lines:
        # The number is drawn by CSS from data-n, so copying the block copies the log alone.
        body = html.escape(line, quote=False) + "\n"
        if n == example.marked:
            rows.append(f'<mark class="errmap-row errmap-hit" data-n="{n}" title="{html.escape(_("the line errmap matched"))}">{body}</mark>')
        else:
            # On a phone only the nearest lines show: a wrapped traceback reads badly there.
            far = " errmap-far" if not -PHONE_BEFORE <= n - example.marked <= PHONE_AFTER else ""
            rows.append(f'<span class="errmap-row{far}" data-n="{n}">{body}</span>')
    origin = {"recorded": _("recorded from real software"), "built": _("the exact upstream message in output we produced")}
    made = origin.get(example.origin, example.origin or _("source not recorded"))
    details = "".join(f"<p><strong>{html.escape(lead(_(label)))}</strong>{prose(value)}</p>"
                      for label, value in (("How:", example.how), ("Machine:", example.machine)) if value)
    where = _("{path}, line {n}: {made}").format(path=f"<code>{html.escape(example.path)}</code>", n=example.marked,
                                                  made=html.escape(made))
    return (
        '<div class="errmap-log">\n'
        f'<p class="errmap-log-source">{where}</p>\n'
        '<pre><code>' + "".join(rows) + "</code></pre>\n"
        + (f'<details class="errmap-how"><summary>{html.escape(_("How this log was made"))}</summary>{details}</details>\n'
           if details else "")
        + "</div>"
    )


def errno_page(e, kb, matcher, fixtures: Path | None) -> str:
    """The Markdown of one code's page, section by section as `errmap explain` prints them."""
    import json

    from errmap.commands.sections import HEADINGS, MANY, doctor_lines, find_example, probe_lines, related_groups
    from errmap.report import i18n
    from errmap.report.i18n import _
    from errmap.report.text import aside, lead

    from errmap.kb import gpus

    names = e.captures | set(gpus.PLACEHOLDERS)
    after = "" if _(":").endswith("：") else " "  # no space after a full-width colon or parenthesis
    within = (lambda words: _("({what}) ").format(what=text(words)).strip())  # (words), in Chinese （words）

    def means() -> list[str]:
        return [prose(e.summary), ""] + ([f"**{_('Applies to:')}**{after}{prose(e.applies_to)}", ""] if e.applies_to else [])

    def fix() -> list[str]:
        # In the KB's order, numbered as explain and scan number them; a step's stack named where its text does not.
        return [f"{n}. " + (f"*{within(stack)}*{after}" if stack else "")
                + (f"*{within(gpus.label(step.gpu))}*{after}" if step.gpu else "")
                + (f"*{within(step.releases.replace(', ', _(', ')))}*{after}" if step.releases else "") + prose(step.text, names)
                for n, step, stack in e.numbered_steps(i18n.language())] + [""]

    def why() -> list[str]:
        return [prose(e.cause, names), ""]

    def links() -> list[str]:
        from errmap.report.contract import link_state

        out = [] if e.links else [_("None recorded.")]
        for link in e.links:
            state = aside(text(s)) if (s := link_state(link)) else ""
            out.append(f"- **{_(link.kind)}** {_link(link.url, link.title)}{state}")
        return out + [""]

    def example() -> list[str]:
        if shown is None:
            return [_("No example log is recorded for this code yet; the messages below are what errmap looks for."), ""]
        return [example_html(shown), ""]

    def related() -> list[str]:
        out = []
        groups = related_groups(e, kb)
        if not groups:
            out += [_("None."), ""]
        for label, items in groups:
            if len(items) > MANY:
                out += [f"**{_(label)}{_(':')}**{after}" + _(", ").join(f"[{n}](../{n}/index.md)" for n, _title in items), ""]
                continue
            out += [f"- {lead(_(label) + _(':'))}[{n} · {text(title or '')}](../{n}/index.md)" for n, title in items] + [""]
        return out

    def confirms() -> list[str]:
        probes, checks = probe_lines(e)
        if not probes:
            return [_("No probe: the message in the log decides alone."), ""]
        out = [_("`errmap scan --probe` reads these facts from the machine the run failed on:"), ""]
        out += [f"- {_code(name)}{_(': ')}{text(_(what))}" for name, what in probes] + [""]
        return out + [f"- {_('{verdict} when').format(verdict=f'**{_(verdict)}**')} {prose(says)}"
                      for verdict, says in checks] + ([""] if checks else [])

    def doctor() -> list[str]:
        rules = doctor_lines(e)
        if not rules:
            return [_("errmap doctor has no check for this code."), ""]
        out = [_("`errmap doctor` warns about this code before a run when:"), ""]
        for test, sentences in rules:
            holes = set(_PLACEHOLDER.findall(" ".join(sentences)))
            if len(sentences) == 1:
                out.append(f"- {_code(test)}{_(': ')}{prose(sentences[0], holes)}")
            else:
                out += [f"- {_code(test)}{_(':')}", *(f"    - {prose(says, holes)}" for says in sentences)]
        return out + [""]

    def messages() -> list[str]:
        # Each message is a heading of its own: the search index makes each heading a section and
        # weighs its title above body text, so a pasted message ranks the section that prints it
        # first. Raw HTML keeps them out of the page's table of contents.
        out = []
        sites = {site for a in e.anchors for site in a.sites}
        if sites:
            out += [_("Its messages were found at {n} places in the source of {m} projects:").format(
                n=len(sites), m=len({repo for repo, _path, _version in sites})), ""]
        for n, a in enumerate(e.anchors, 1):
            lits = _(" or ").join(_code(lit) for lit in a.literals)
            rules = "".join(
                f'<br><span class="errmap-pattern">{label} {_code(value)}</span>'
                for label, value in ((_("only inside a traceback with a frame matching"), a.frame), (_("not on a line matching"), a.unless))
                if value
            ) + "".join(f'<br><span class="errmap-pattern">{_("seen in")} {_code(repo)} {_code(path)} ({html.escape(version)})</span>'
                        for repo, path, version in a.sites)
            out += [f'<h3 class="errmap-message" id="message-{n}">{lits}</h3>',
                    f'<p>{_("printed by")} {_source(a.source)}<br>'
                    f'<span class="errmap-pattern">{_("pattern")} {_code(a.regex)}</span>{rules}</p>', ""]
        if e.hints:  # the second tier: on a failure line no message above explains (errmap/readings.py)
            out += [f'<h3 class="errmap-message" id="hints">{_("Words of its family")}</h3>',
                    _("A failure line that none of these messages explains, holding every word of one of these, is "
                      "diagnosed as this code, marked likely:"), "",
                    *(f"- {' + '.join(_code(w) for w in hint)}" for hint in e.hints), ""]
        return out

    body = {"means": means, "fix": fix, "why": why, "links": links, "example": example,
            "related": related, "confirms": confirms, "doctor": doctor, "messages": messages}
    shown = find_example(e, matcher, fixtures)
    seen = tuple(v for _, v in shown.captures if re.fullmatch(r"[A-Za-z_][\w.-]{1,39}", v)) if shown else ()
    out = [
        "---",
        # The tags of every section of the page, weighed a little above a title (mkdocs.yml).
        # JSON is YAML: every message is quoted and escaped whatever characters it holds.
        f"tags: {json.dumps(page_tags(e, kb, seen), ensure_ascii=True)}",
        "---",
        "",
        f"# {e.errno} · {text(e.title)}",
        "",
        f'<p class="errmap-meta"><code>{e.slug}</code> · {html.escape(e.group)} · {_(ROLE.get(e.role, e.role))}</p>',
        "",
    ]
    for key, heading in HEADINGS.items():
        # The related codes' titles are theirs: search finds their pages by them, not this one.
        hidden = " { data-search-exclude }" if key == "related" else ""
        out += [f"## {_(heading)}{hidden}", "", *body[key]()]
    out += ["", f'<p class="errmap-foot">{_("In the terminal:")} <code>errmap explain {e.errno}</code></p>', ""]
    return "\n".join(out)


def page_tags(e, kb, seen: tuple[str, ...] = ()) -> list[str]:
    """The words a page is found by above all: those of the code's first message, so that message ranks
    this page above those where it is one message of many, and on the Chinese site the words Chinese
    users type for the error (kb/zh `search`: 爆显存, 断点续训), which its text does not say."""
    from errmap.report.i18n import language

    zh = kb.zh.get(e.errno) if language() == "zh" else None
    return search_words(e, seen, e.anchors[:1]) + list(zh.search if zh else ())


def groups(kb) -> list[tuple[str, list]]:
    """The codes by group, in errno order (the catalog's grouping)."""
    out: list[tuple[str, list]] = []
    for e in kb:
        if not out or out[-1][0] != e.group:
            out.append((e.group, []))
        out[-1][1].append(e)
    return out


def index_page(kb) -> str:
    from errmap.report.i18n import _

    n = len(kb)
    out = [
        f"# {_('Error codes')}",
        "",
        _("The {n} codes errmap diagnoses, grouped as in its catalog. A *root cause* is the error "
          "itself; a *consequence* is what usually follows another error, so errmap looks for that one first.").format(n=n),
        "",
    ]
    for name, entries in groups(kb):
        out += [f"## {text(name)}", "", f"| {_('errno')} | {_('title')} | {_('role')} |", "| --- | --- | --- |"]
        for e in entries:
            out.append(f"| [{e.errno}]({e.errno}/index.md) | [{text(e.title)}]({e.errno}/index.md) | {_(ROLE.get(e.role, e.role))} |")
        out.append("")
    return "\n".join(out)


def pages(kb, fixtures: Path | None) -> dict[str, str]:
    """Every generated page by source path."""
    from errmap.scan.matcher import Matcher

    matcher = Matcher(kb)
    out = {"errno/index.md": index_page(kb)}
    for e in kb:
        out[page_uri(e.errno)] = errno_page(e, kb, matcher, fixtures)
    return out


def nav(kb, extra: tuple = ()) -> list:
    """The navigation. MkDocs and the theme print its titles as HTML (the menu, the page's header and
    <title>, the search index), so a title or group from the KB is HTML-escaped here."""
    from errmap.report.i18n import _

    return [
        {_("Home"): "index.md"},
        *extra,
        {_("Error codes"): "errno/index.md"},
        *({html.escape(name): [{html.escape(f"{e.errno} · {e.title}"): page_uri(e.errno)} for e in entries]}
          for name, entries in groups(kb)),
    ]


def load_kb(root: Path, lang: str = "en"):
    """The KB of this checkout and your own folders in ERRMAP_KB_PATH, in `lang`; any problem fails the
    build with the list of problems."""
    from errmap.kb import load as kbmod
    from errmap.kb import files as kbfiles
    from errmap.kb import model as kbmodel

    entries, problems = kbmod.load_dir(root / "kb", kbmodel.OFFICIAL_RANGE)
    for folder in filter(None, os.environ.get("ERRMAP_KB_PATH", "").split(os.pathsep)):
        if not Path(folder).is_dir():
            problems.append(f"{folder}: not a folder (ERRMAP_KB_PATH)")
            continue
        found, bad = kbmod.load_dir(Path(folder), kbmodel.USER_RANGE)
        entries.update(found)
        problems += bad
    zh = kbmod.load_translations(root / "kb", entries, problems) if lang == "zh" else {}
    problems += kbmod.cross_check(entries)
    if problems:
        raise kbfiles.KBError(problems)
    return kbmodel.KB(entries, zh=zh).localized(lang)


# ---------------------------------------------------------------- MkDocs hook

_STATE: dict = {}


def on_config(config):
    from mkdocs.exceptions import PluginError

    from errmap.kb import files as kbfiles

    from errmap.report import i18n

    root = Path(config.config_file_path).resolve().parent
    lang = config.extra.get("errmap_lang", "en")  # mkdocs.zh.yml builds the Chinese site
    i18n.set_language(lang)
    try:
        kb = load_kb(root, lang)
    except kbfiles.KBError as exc:
        raise PluginError("the knowledge base has problems:\n  " + "\n  ".join(exc.problems)) from None
    fixtures = root / "fixtures"
    _STATE.update(kb=kb, fixtures=fixtures if fixtures.is_dir() else None)
    config.nav = nav(kb, tuple(config.extra.get("errmap_pages", ())))
    _labels(config)
    if lang == "zh":
        _chinese_search_words(root, kb)
    return config


def _labels(config) -> None:
    """The site's own labels in its language: the colour toggles, the headings' permanent links and what
    javascripts/errmap.js says on a page opened from the file system (read from the page's <meta>)."""
    from errmap.report.i18n import _

    for scheme in config.theme.get("palette") or ():
        if isinstance(scheme, dict) and scheme.get("toggle", {}).get("name"):
            scheme["toggle"] = {**scheme["toggle"], "name": _(scheme["toggle"]["name"])}
    config.mdx_configs.setdefault("toc", {})["permalink_title"] = _("Permanent link")
    _STATE["no_search"] = (_("Search needs the site served over HTTP: run `errmap docs serve` and open http://127.0.0.1:8000/"),
                           _("Search needs errmap docs serve"))


def _chinese_search_words(root: Path, kb) -> None:
    """Teach jieba, which Material's search uses to split Chinese text, the glossary's search
    phrases (kb/glossary.yaml `search`) and the words users type for each code (kb/zh `search`), so
    that a query such as 显存不足 or 爆显存 stays one word, as the page's tags hold it."""
    try:
        import jieba
    except ImportError:
        return
    import yaml

    data = yaml.safe_load((root / "kb" / "glossary.yaml").read_text(encoding="utf-8"))
    typed = [run for text in kb.zh.values() for word in text.search for run in _HAN_RUN.findall(word)]
    for word in [*(t["zh"] for t in data["terms"]), *data.get("search", []), *typed]:
        jieba.add_word(word)


def on_files(files, config):
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File

    for uri, content in pages(_STATE["kb"], _STATE["fixtures"]).items():
        if files.get_file_from_path(uri) is not None:
            raise PluginError(f"docs/{uri} is generated from kb/; delete the hand-written file")
        files.append(File.generated(config, uri, content=content))
    return files


def on_post_page(output: str, page, config) -> str:
    """The theme writes <title> through Jinja's striptags, which turns the escaped title back into
    raw HTML: escape it there again."""
    from markupsafe import Markup

    if page.title:
        plain = Markup(page.title).striptags()
        output = output.replace(f"<title>{plain}", f"<title>{html.escape(plain, quote=False)}", 1)
    if "no_search" in _STATE:  # what javascripts/errmap.js says, in the site's language
        says, placeholder = (html.escape(s) for s in _STATE["no_search"])
        output = output.replace("</head>", f'<meta name="errmap-no-search" content="{says}" data-placeholder="{placeholder}">\n</head>', 1)
    return output


# ---------------------------------------------------------------- commands


MARKER = ".errmap-site"  # in a built site: every path errmap wrote there, one a line


def _written(site: Path) -> set[str]:
    """The paths a build wrote into `site`, from its marker; empty when it has none."""
    try:
        return set((site / MARKER).read_text(encoding="utf-8").splitlines()[1:])
    except (OSError, UnicodeDecodeError):
        return set()


def _paths(site: Path) -> list[str]:
    """Every file, folder and link under `site`, relative, links not followed; not the dot-files at
    its top (the marker among them), which neither MkDocs nor errmap touches."""
    found = []
    for top, dirs, files in os.walk(site):
        rel = Path(top).relative_to(site)
        found += [(rel / name).as_posix() for name in [*dirs, *files]]
    return [p for p in found if not p.startswith(".")]


class SiteRefused(Exception):
    """The output folder holds something errmap did not write: it is left as it is."""


def check_out(site: Path) -> None:
    """Refuse a folder a build would change unless it is empty or holds only an earlier errmap site."""
    if not site.exists():
        return
    if not site.is_dir():
        raise SiteRefused(f"{site} is not a folder")
    written = _written(site)
    foreign = [p for p in _paths(site) if p not in written]
    if foreign:
        kind = "an earlier errmap site with files added" if written else "not empty and not an errmap site"
        raise SiteRefused(f"{site} is {kind} (e.g. {foreign[0]}); nothing was changed: give a new or empty folder")


def _install(built: Path, site: Path) -> None:
    """Replace the earlier site in `site` (only what errmap wrote) with the one just built."""
    site.mkdir(parents=True, exist_ok=True)
    old = sorted(_written(site), key=lambda p: p.count("/"), reverse=True)  # deepest first
    for rel in old:
        path = site / rel
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    for entry in sorted(built.iterdir()):
        os.replace(entry, site / entry.name)
    tmp = site / (MARKER + ".tmp")
    tmp.write_text("\n".join(["errmap docs site: errmap wrote these paths and a rebuild replaces them", *_paths(site)]) + "\n",
                   encoding="utf-8")
    os.replace(tmp, site / MARKER)


def build(out: Path | None = None, strict: bool = True, kb_dirs: tuple[str, ...] = ()) -> int:
    """Build the site with MkDocs (strict: any warning, e.g. a broken link, fails it); the exit status.

    MkDocs empties its output folder first, so it builds into a new folder beside `out`, and the
    result replaces what an earlier build wrote: a folder holding anything else is refused
    (SiteRefused) before anything is built, and a failed build changes nothing.
    """
    import tempfile

    root = checkout()
    site = Path(out).resolve() if out is not None else root / "site"
    check_out(site)
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:
        print("errmap docs build needs the docs extra: pip install -e '.[docs]'", file=sys.stderr)
        return 2
    site.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".errmap-build-", dir=site.parent) as tmp:
        built = Path(tmp) / "site"
        # NO_MKDOCS_2_WARNING: MkDocs prints a notice about its own future on every build.
        kb_path = os.pathsep.join([*(str(Path(d).resolve()) for d in kb_dirs), os.environ.get("ERRMAP_KB_PATH", "")])
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "ERRMAP_KB_PATH": kb_path.strip(os.pathsep)}
        status = 0
        # The English site, then the Chinese one into its zh/ folder.
        for config, sub in ((CONFIG, ""), (CONFIG_ZH, "zh")):
            cmd = [sys.executable, "-m", "mkdocs", "build", "--config-file", str(root / config), "--site-dir", str(built / sub)]
            if strict:
                cmd.append("--strict")
            status = status or subprocess.call(cmd, cwd=root, env=env)
        if status == 0:
            check_out(site)  # nothing was added while it built
            _install(built, site)
            print(f"errmap: the site is in {site}", file=sys.stderr)
    return status


def serve(site: Path, port: int = 8000) -> None:
    """Serve a built site on 127.0.0.1 (search needs HTTP; file:// pages read fine without it)."""
    import functools
    import http.server

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as httpd:
        print(f"serving {site} at http://127.0.0.1:{httpd.server_address[1]}/ (Ctrl-C stops)", flush=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
