"""The docs site: generated pages, their escaping, the same sections as `errmap explain`, the strict build."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from errmap.commands import docs
from errmap.commands import search as searchwords
from errmap.commands.explain import print_entry
from errmap.commands.sections import SECTIONS, find_example
from errmap.report.contract import docs_url

from conftest import ROOT, errmap
import docs_site
from docs_site import HOSTILE_ENTRY, needs_mkdocs

# The Triton message as triton/runtime/errors.py (class OutOfResources) formats it.
TRITON = (
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, "
    "Hardware limit: 65536. Reducing block sizes or `num_stages` may help."
)


def kb_files() -> list[Path]:
    return sorted((ROOT / "kb").glob("[0-9]*.yaml"))


def strip_tags(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


# ---------------------------------------------------------------- escaping


HOSTILE = "<script>alert(1)</script> *bold* _it_ [x](javascript:y) `tick` a|b #h ~~s~~ & 'q' \"d\" {x} \\n"


def test_text_leaves_no_markup_characters():
    out = docs.text(HOSTILE)
    for c in "<>*_[]`|#~{}\\'\"":
        assert c not in out.replace("&#", "").replace(";", ""), c
    assert html.unescape(out) == HOSTILE


def test_text_renders_back_to_the_same_words_through_markdown():
    markdown = pytest.importorskip("markdown")
    for ext in ([], ["tables", "toc", "attr_list"]):
        out = markdown.markdown(docs.text(HOSTILE), extensions=ext)
        assert "<script" not in out and "<em>" not in out and "<strong>" not in out and "<a " not in out
        assert strip_tags(out) == HOSTILE


def test_prose_keeps_code_spans_and_shows_placeholders(kb):
    e = kb.get(1012)
    out = docs.prose("set `a.b_c=False` under {limit} bytes, {notacapture} and `{required}`", e.captures)
    assert "<code>a.b&#95;c=False</code>" in out
    assert "<var>&lt;limit&gt;</var>" in out
    assert "&#123;notacapture&#125;" in out
    assert "<code>&lt;required&gt;</code>" in out


def test_regex_phrases_are_the_printed_words():
    assert searchwords.regex_phrases(
        r"out of resource: (?P<resource>shared memory|\w+),? ?Required: (?P<required>\d+),? ?Hardware limit: ?(?P<limit>\d+)"
    ) == ["out of resource:", "shared memory", "Required:", "Hardware limit:"]
    assert searchwords.regex_phrases(r"^(?:[\w.]+: )?Key '(?P<key>[^']+)' is not in struct") == ["Key '", "' is not in struct"]
    assert searchwords.regex_phrases(r"CUDA error: no kernel image is available\.? (?i)x{2,3}abcd") == [
        "CUDA error: no kernel image is available", "abcd"]


def test_search_words_come_from_the_messages(kb):
    words = searchwords.search_words(kb.get(1012))
    assert {"hardware", "limit", "shared", "memory", "resource"} <= set(words)
    assert all(w == w.lower() and not searchwords.SEARCH_SEPARATOR.search(w) for w in words)
    # search matches typed words as prefixes: no tag begins another, or one word would count twice
    for e in kb:
        tags = searchwords.search_words(e)
        assert not [(a, b) for a in tags for b in tags if a != b and b.startswith(a)], e.errno
    assert "memoryerror" in searchwords.search_words(kb.get(1021)) and "memory" not in searchwords.search_words(kb.get(1021))


def test_search_words_hold_the_values_a_pattern_lists(kb):
    assert searchwords._values(r"^KeyError: '(?P<column>prompt|reward_model|data source)'$") == ["prompt", "reward_model", "data source"]
    assert searchwords._values(r"(?P<n>\d+|x)") == []  # a class is not a value
    words = searchwords.search_words(kb.get(1033))
    assert "prompts" in words and "keyerror" in words  # `prompt` begins `prompts`: typed, it finds that one
    plain = searchwords.search_words(kb.get(1008))
    assert "qqshard" not in plain and {"qqshard", "qqloader"} <= set(searchwords.search_words(kb.get(1008), ("qqshard_qqloader",)))


def test_search_separator_is_the_one_mkdocs_uses():
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    search = next(p["search"] for p in config["plugins"] if isinstance(p, dict) and "search" in p)
    assert search["separator"] == searchwords.SEARCH_SEPARATOR.pattern


def test_page_front_matter_is_valid_yaml(kb, matcher):
    import yaml

    for e in kb:
        page = docs.errno_page(e, kb, matcher, None)
        assert page.startswith("---\n")
        meta = yaml.safe_load(page.split("---\n")[1])
        assert meta["tags"] == searchwords.search_words(e, (), e.anchors[:1])  # the words of its first message


def test_each_message_is_a_heading_of_its_own(kb, matcher):
    """The search index makes each heading a section found by its title: one per message."""
    e = kb.get(1033)
    page = docs.errno_page(e, kb, matcher, None)
    heads = re.findall(r'<h3 class="errmap-message" id="message-(\d+)">(.*?)</h3>', page)
    assert [int(n) for n, _ in heads] == list(range(1, len(e.anchors) + 1))
    assert heads[0][1] == "<code>KeyError: &#39;</code>"


# ---------------------------------------------------------------- the example log


@pytest.fixture()
def fixtures(tmp_path: Path) -> Path:
    folder = tmp_path / "fixtures" / "1012"
    folder.mkdir(parents=True)
    lines = [f"step {i} loss 0.{i:03d} \x1b[32mok\x1b[0m" for i in range(1, 21)]
    lines += [
        "progress 10%\rprogress 50%\rprogress 100%",
        "(WorkerDict pid=7, ip=10.0.0.2) [rank1]: <script>alert('x')</script> & *not bold*",
        f"(WorkerDict pid=7, ip=10.0.0.2) [rank1]: {TRITON}",
        "after 1",
        "after 2",
        "after 3",
        "after 4",
    ]
    (folder / "b-built.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "b-built.source.yaml").write_text("origin: built\nhow: a test\n", encoding="utf-8")
    # A recorded fixture is preferred to a built one, whatever the names.
    (folder / "c-recorded.log").write_text("nothing\n" + TRITON + "\n", encoding="utf-8")
    (folder / "c-recorded.source.yaml").write_text("origin: recorded\nhow: ran it\n", encoding="utf-8")
    return tmp_path / "fixtures"


def test_example_prefers_recorded_fixture(kb, matcher, fixtures):
    ex = find_example(kb.get(1012), matcher, fixtures)
    assert ex is not None and ex.path == "fixtures/1012/c-recorded.log" and ex.origin == "recorded"
    assert ex.marked == 2 and ex.lines == ((1, "nothing"), (2, TRITON))


def test_example_window_marks_the_matched_line(kb, matcher, fixtures):
    (fixtures / "1012" / "c-recorded.log").unlink()
    ex = find_example(kb.get(1012), matcher, fixtures)
    assert ex is not None and ex.marked == 23 and ex.origin == "built" and ex.how == "a test"
    numbers = [n for n, _ in ex.lines]
    assert numbers == list(range(23 - 8, 23 + 3 + 1))
    text = dict(ex.lines)
    assert text[21] == "progress 100%"  # a \r progress bar shows as the terminal leaves it
    assert "\x1b" not in "".join(text.values())
    assert text[23].endswith(TRITON)

    page = docs.example_html(ex)
    assert "<script>" not in page and "&lt;script&gt;alert('x')&lt;/script&gt;" in page
    marked = re.findall(r'<mark class="errmap-row errmap-hit" data-n="(\d+)"[^>]*>(.*?)</mark>', page, re.S)
    assert len(marked) == 1 and marked[0][0] == "23" and html.unescape(marked[0][1]).strip().endswith(TRITON)
    # Nothing in the block is blank: a blank line would end the raw HTML block in Markdown.
    assert all(line.strip() for line in page.splitlines())


def test_no_fixture_no_example(kb, matcher, tmp_path):
    assert find_example(kb.get(1012), matcher, tmp_path) is None
    assert find_example(kb.get(1012), matcher, None) is None


# ---------------------------------------------------------------- pages = explain


def headings(markdown_text: str, level: str = "## ") -> list[str]:
    """The headings' text, without their attribute lists ({ data-search-exclude })."""
    return [re.sub(r" \{[^}]*\}$", "", line[len(level):]) for line in markdown_text.splitlines() if line.startswith(level)]


def test_every_page_has_the_sections_of_explain(kb, matcher):
    fixtures = ROOT / "fixtures"
    for e in kb:
        page = docs.errno_page(e, kb, matcher, fixtures)
        assert headings(page) == list(SECTIONS), e.errno
        assert headings(page, "# ")[0].startswith(f"{e.errno} · ")
        con = Console(record=True, width=160, color_system=None)
        print_entry(con, e, kb, matcher)
        out = con.export_text()
        at = [out.find(f"\n{title}") for title in SECTIONS]
        assert -1 not in at and at == sorted(at), (e.errno, at)


def test_page_carries_the_kb_text(kb, matcher):
    for e in kb:
        page = strip_tags(docs.errno_page(e, kb, matcher, None))
        assert e.summary.split()[0] in page
        for link in e.links:
            assert link.title in page
        for a in e.anchors:
            for lit in a.literals:
                assert lit in page
        for n in [*e.related, *e.caused_by]:
            assert f"../{n}/index.md" in docs.errno_page(e, kb, matcher, None)


def test_index_lists_every_kb_file(kb):
    page = docs.index_page(kb)
    rows = re.findall(r"^\| \[(\d+)\]\((\d+)/index\.md\)", page, re.M)
    assert len(rows) == len(kb_files()) == len(kb)
    assert [int(n) for n, _ in rows] == sorted(e.errno for e in kb)
    assert headings(page) == list(dict.fromkeys(e.group for e in kb))


def test_nav_and_pages_cover_every_code(kb):
    pages = docs.pages(kb, None)
    assert set(pages) == {"errno/index.md"} | {docs.page_uri(e.errno) for e in kb}
    in_nav = [uri for group in docs.nav(kb)[2:] for items in group.values() for item in items for uri in item.values()]
    assert sorted(in_nav) == sorted(docs.page_uri(e.errno) for e in kb)


# ---------------------------------------------------------------- links from the terminal


def test_docs_url_follows_the_configured_base(monkeypatch):
    monkeypatch.setenv("ERRMAP_DOCS_URL", "http://127.0.0.1:8000/")
    assert docs_url(1012) == "http://127.0.0.1:8000/errno/1012/"
    monkeypatch.delenv("ERRMAP_DOCS_URL")
    url = docs_url(1012)
    built = ROOT / "site" / "errno" / "1012" / "index.html"
    assert url == (built.as_uri() if built.is_file() else None)


def test_scan_links_each_diagnosis_to_its_page(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 1\n" + TRITON + "\n", encoding="utf-8")
    env = {"ERRMAP_DOCS_URL": "https://docs.example.invalid/errmap"}
    proc = errmap("scan", str(log), env=env)
    assert proc.returncode == 1
    assert "https://docs.example.invalid/errmap/errno/1012/" in proc.stdout.decode()
    proc = errmap("scan", "--format", "json", str(log), env=env)
    import json

    (d,) = json.loads(proc.stdout)["diagnoses"]
    assert d["docs"] == "https://docs.example.invalid/errmap/errno/1012/"
    proc = errmap("explain", "1012", env=env)
    assert "https://docs.example.invalid/errmap/errno/1012/" in proc.stdout.decode()


def test_sarif_help_uri_is_never_a_local_file(tmp_path):
    from errmap.report.sarif import sarif

    log = tmp_path / "train.log"
    log.write_text("step 1\n" + TRITON + "\n", encoding="utf-8")
    doc = json.loads(errmap("scan", "--format", "json", str(log)).stdout)
    (d,) = doc["diagnoses"]
    page = tmp_path / "site" / "errno" / "1012" / "index.html"  # what docs_url gives after `docs build`
    for docs_value, want in ((page.as_uri(), None), (None, None), ("https://docs.example.invalid/errmap/errno/1012/",) * 2):
        (rule,) = sarif([{**d, "docs": docs_value}], [])["runs"][0]["tool"]["driver"]["rules"]
        assert rule.get("helpUri") == want, docs_value


# ---------------------------------------------------------------- the build


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    needs_mkdocs()
    out = tmp_path_factory.mktemp("site")
    proc = errmap("docs", "build", "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    return out


def test_build_never_deletes_a_users_files(tmp_path):
    out = tmp_path / "p"
    (out / "thesis").mkdir(parents=True)
    (out / "thesis" / "ch1.tex").write_text("only-copy\n", encoding="utf-8")
    proc = errmap("docs", "build", "--out", str(out))
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert err.count("\n") == 1 and "not an errmap site" in err and "thesis" in err, err
    assert (out / "thesis" / "ch1.tex").read_text(encoding="utf-8") == "only-copy\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]  # nothing built beside it either


def test_rebuild_replaces_only_an_earlier_site(site):
    needs_mkdocs()
    written = set((site / docs.MARKER).read_text(encoding="utf-8").splitlines()[1:])
    assert "errno/1012/index.html" in written and "index.html" in written
    (site / "errno" / "1012" / "index.html").write_text("stale", encoding="utf-8")
    (site / ".keep").write_text("hidden", encoding="utf-8")  # MkDocs never deletes a dot-file at the top
    proc = errmap("docs", "build", "--out", str(site), timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    assert ">1012 · " in (site / "errno" / "1012" / "index.html").read_text(encoding="utf-8")
    assert (site / ".keep").read_text(encoding="utf-8") == "hidden"
    (site / "errno" / "notes.txt").write_text("mine", encoding="utf-8")
    proc = errmap("docs", "build", "--out", str(site))
    assert proc.returncode == 2 and "errno/notes.txt" in proc.stderr.decode()
    assert (site / "errno" / "notes.txt").read_text(encoding="utf-8") == "mine"
    (site / "errno" / "notes.txt").unlink()


@pytest.fixture(scope="module")
def hostile_site(tmp_path_factory) -> Path:
    return docs_site.hostile_site(tmp_path_factory)


def test_nav_titles_are_escaped(kb):
    import yaml

    from errmap.kb.model import Entry

    data = yaml.safe_load(HOSTILE_ENTRY)
    entry = Entry.from_dict({**data, "anchors": [dict(data["anchors"][0], unless=None, frame=None)],
                            "fix": [{"text": s} for s in data["fix"]], "links": []})
    (group,) = [g for g in docs.nav([entry]) if isinstance(g, dict) and "Home" not in g and "Error codes" not in g]
    (name, items), = group.items()
    assert "<" not in name and html.unescape(name) == data["group"]
    (title, uri), = items[0].items()
    assert "<" not in title and html.unescape(title) == f"9001 · {data['title']}" and uri == "errno/9001/index.md"


def test_a_kb_title_or_group_is_text_on_every_page(hostile_site):
    pages = sorted(hostile_site.rglob("*.html"))
    assert (hostile_site / "errno" / "9001" / "index.html") in pages
    for page in pages:
        markup = page.read_text(encoding="utf-8")
        for raw in ("<script>window.pwned", "<img src=x", "<b>bold", "</title><script>", "<i>markup", "<u>markup", "<em>this"):
            assert raw not in markup, (page, raw)
    page = (hostile_site / "errno" / "9001" / "index.html").read_text(encoding="utf-8")
    assert "<title>9001 · &lt;/title&gt;&lt;script&gt;window.pwned = 1&lt;/script&gt; &lt;b&gt;bold&lt;/b&gt; &amp; co - errmap</title>" in page
    import json

    index = json.loads((hostile_site / "search" / "search_index.json").read_text(encoding="utf-8"))
    for doc in index["docs"]:
        assert "<script" not in doc["title"] + doc["text"] and "<img" not in doc["title"] + doc["text"], doc


def test_build_has_a_page_per_kb_file(site):
    for f in kb_files():
        errno = f.name.split("-", 1)[0]
        page = (site / "errno" / errno / "index.html").read_text(encoding="utf-8")
        assert f">{errno} · " in page
    index = (site / "errno" / "index.html").read_text(encoding="utf-8")
    assert len(set(re.findall(r'href="(\d+)/index\.html"', index))) == len(kb_files())
    assert (site / "search" / "search_index.json").is_file()


def test_built_site_loads_nothing_from_outside(site):
    for page in site.rglob("*.html"):
        markup = page.read_text(encoding="utf-8")
        external = re.findall(r'<(?:script|img|iframe)[^>]+src="(?:https?:)?//[^"]+"|<link[^>]+href="(?:https?:)?//[^"]+"', markup)
        assert not external, (page, external)


def test_search_index_holds_the_log_words(site):
    import json

    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    text = " ".join(d["text"] for d in index["docs"] if d["location"].startswith("errno/1012/"))
    assert "Hardware limit" in text and "shared memory" in text


def test_search_index_leaves_out_related_codes_and_holds_what_users_type(site):
    """A page's related codes are other codes' titles, left out of its search index: they find those
    codes. The Chinese site's tags hold the words Chinese users type for a code (kb/zh `search`)."""
    import json

    from errmap.report.i18n import _, set_language

    index = {}
    for lang in ("en", "zh"):
        set_language(lang)
        try:
            related = _("Related codes")
        finally:
            set_language(None)
        docs_ = json.loads((site / ("zh" if lang == "zh" else "") / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
        assert not [d["location"] for d in docs_ if d["title"].replace("\u200b", "") == related]
        index[lang] = {d["location"]: d for d in docs_}
    assert "爆显存" in index["zh"]["errno/1017/index.html"]["tags"]
    assert not any("爆显存" in d.get("tags", ()) for d in index["en"].values())


def test_the_chinese_site_says_its_own_labels_in_chinese(site):
    """The generator's labels, the theme's toggles and permanent links and the file:// notice of the Chinese
    pages come from the catalogue; the English site keeps its English."""
    page = (site / "zh" / "errno" / "1012" / "index.html").read_text(encoding="utf-8")
    index = (site / "zh" / "errno" / "index.html").read_text(encoding="utf-8")
    for english in ("Permanent link", "Dark mode", "Light mode", "How this log was made", "recorded from real software",
                    "Related", "Usually caused by", "the line errmap matched", "Search needs", "<th>errno</th>", "</code>, line "):
        assert english not in page + index, english
    assert 'title="永久链接"' in page and "深色模式" in page and "这份日志是怎么得到的" in page and "<th>错误码</th>" in index
    assert 'name="errmap-no-search" content="搜索需要通过 HTTP 访问站点' in page
    assert "相关：<a" in (site / "zh" / "errno" / "1013" / "index.html").read_text(encoding="utf-8")
    english = (site / "errno" / "1012" / "index.html").read_text(encoding="utf-8")
    assert 'title="Permanent link"' in english and "How this log was made" in english and "Search needs" in english


def _checkout_copy(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir(parents=True)
    shutil.copy(ROOT / "mkdocs.yml", root)
    shutil.copytree(ROOT / "errmap", root / "errmap", ignore=shutil.ignore_patterns("__pycache__"))  # the hook imports i18n, kb, translations
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copytree(ROOT / "kb", root / "kb")
    shutil.copytree(ROOT / "overrides", root / "overrides")  # the theme's custom_dir (language switch)
    return root


def _mkdocs(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(root / "site")],
                          cwd=root, capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})


def test_strict_build_fails_on_a_broken_link(tmp_path):
    needs_mkdocs()
    root = _checkout_copy(tmp_path)
    assert _mkdocs(root).returncode == 0
    (root / "docs" / "broken.md").write_text("# Broken\n\nSee [a page](nowhere.md).\n", encoding="utf-8")
    proc = _mkdocs(root)
    assert proc.returncode != 0 and "nowhere.md" in proc.stderr


def test_build_refuses_a_hand_written_errno_page(tmp_path):
    needs_mkdocs()
    root = _checkout_copy(tmp_path)
    (root / "docs" / "errno" / "1012").mkdir(parents=True)
    (root / "docs" / "errno" / "1012" / "index.md").write_text("# by hand\n", encoding="utf-8")
    proc = _mkdocs(root)
    assert proc.returncode != 0 and "generated from kb/" in proc.stderr


def test_build_fails_on_a_broken_kb_entry(tmp_path):
    needs_mkdocs()
    root = _checkout_copy(tmp_path)
    (root / "kb" / "1001-no-kernel-image.yaml").write_text("errno: 1001\nslug: no-kernel-image\n", encoding="utf-8")
    proc = _mkdocs(root)
    assert proc.returncode != 0 and "1001-no-kernel-image.yaml" in proc.stderr


def test_serve_answers_on_localhost(site):
    import urllib.request

    proc = subprocess.Popen([sys.executable, "-m", "errmap", "docs", "serve", "--dir", str(site), "--port", "0"],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+/", proc.stdout.readline())[0]
        with urllib.request.urlopen(url + "errno/1012/", timeout=10) as resp:
            assert ">1012 · " in resp.read().decode()
    finally:
        proc.terminate()
        proc.wait(10)


def test_serve_on_a_busy_or_bad_port_says_so(site):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = errmap("docs", "serve", "--dir", str(site), "--port", str(port), timeout=30)
    assert proc.returncode == 2
    assert f"cannot serve on 127.0.0.1:{port}: Address already in use" in proc.stderr.decode()
    for bad in ("70000", "-1", "http"):
        proc = errmap("docs", "serve", "--dir", str(site), "--port", bad, timeout=30)
        assert proc.returncode == 2 and "Invalid value for '--port'" in proc.stderr.decode(), bad
