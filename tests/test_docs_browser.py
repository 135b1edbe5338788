"""The built docs site in a real headless browser: Debian's chromium driven by playwright, on 127.0.0.1.

Screenshots of the 1012 page and of a search go to artifacts/ at a laptop and a phone width.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
import shutil
import threading
from pathlib import Path

import pytest

from conftest import ROOT
from docs_site import HOSTILE_TITLE, hostile_site
from errmap.commands.sections import SECTIONS

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
LAPTOP = {"width": 1366, "height": 768}
PHONE = {"width": 390, "height": 844}
ARTIFACTS = ROOT / "artifacts"


def _missing(reason: str) -> None:
    """Skip where the browser is not installed; in CI it must be, so there it fails."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (.ci/run installs it)")
    pytest.skip(reason)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory) -> Path:
    return hostile_site(tmp_path_factory)


@pytest.fixture(scope="module")
def base_url(site_dir):
    site = site_dir
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).is_file():
        _missing("Debian's chromium is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[docs]')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield b
        b.close()


@pytest.fixture()
def outside():
    """Requests that tried to leave 127.0.0.1; the site must work with no network."""
    return []


@contextlib.contextmanager
def viewing(browser, base_url: str, outside: list, viewport: dict):
    """A page in a browser context of its own that loads nothing but the site: a request elsewhere
    is blocked and recorded in `outside`, and when the page is done there must be none."""
    context = browser.new_context(viewport=viewport, device_scale_factor=1, service_workers="block")
    host = base_url + "/"

    def route(r):
        if r.request.url.startswith(host):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    try:
        yield context.new_page()
    finally:
        context.close()
    assert not outside, outside


def search(page, words: str) -> list[str]:
    """Type into the search box as a person does; the hrefs of the results, best first."""
    opener = page.locator('label.md-header__button[for="__search"]')
    if opener.is_visible():  # phone width: the box hides behind an icon
        opener.click()
    else:
        page.locator(".md-search__input").click()
    page.locator(".md-search__input").press_sequentially(words, delay=30)
    # The theme searches on keyup. Playwright types a character off the keyboard (Chinese) as text
    # alone, with no key; a person's input method commits it with one (Space, Enter): so does this.
    page.locator(".md-search__input").press("End")
    page.wait_for_selector(".md-search-result__item", timeout=15000)
    page.wait_for_timeout(600)  # the results of the last keystroke replace those of the one before
    return [a.get_attribute("href") or "" for a in page.locator(".md-search-result__link").all()]


def shot(page, name: str, **kw) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), **kw)
    return path


def kb_count() -> int:
    return len(list((ROOT / "kb").glob("[0-9]*.yaml"))) + 1  # and the user entry 9001


def test_index_lists_every_code(browser, base_url, outside):
    with viewing(browser, base_url, outside, LAPTOP) as page:
        page.goto(base_url + "/errno/")
        rows = page.locator("article table tbody tr")
        assert rows.count() == kb_count()
        codes = [rows.nth(i).locator("td").first.inner_text().strip() for i in range(rows.count())]
        assert codes == sorted(codes) and all(re.fullmatch(r"\d{4}", c) for c in codes) and codes[-1] == "9001"
        first = rows.first.locator("a").first
        href = first.get_attribute("href")
        first.click()
        page.wait_for_load_state()
        assert page.url.endswith(href) and page.locator("h1").inner_text().startswith(codes[0])


@pytest.mark.parametrize("name,viewport", [("laptop", LAPTOP), ("phone", PHONE)])
def test_1012_page_shows_its_sections(browser, base_url, outside, name, viewport):
    with viewing(browser, base_url, outside, viewport) as page:
        page.goto(base_url + "/errno/1012/")
        assert page.locator("h1").inner_text().startswith("1012 · ")
        titles = [t.strip().rstrip("¶").strip() for t in page.locator("article h2").all_inner_texts()]
        assert titles == list(SECTIONS)
        # What the reader came for starts on the first screen, even on a phone.
        assert page.locator("article h2#how-to-fix").bounding_box()["y"] < viewport["height"]
        from errmap.kb import load as kbmod

        entry = kbmod.load().get(1012)
        fix = page.locator("article h2#how-to-fix + ol > li")
        assert fix.count() == len(entry.fix)
        assert fix.locator("code").count() >= 1  # config keys show as code
        for link in entry.links:
            assert page.locator(f'article a[href="{link.url}"]').count() == 1
        log = page.locator(".errmap-log mark.errmap-hit")
        if log.count():
            assert "Hardware limit" in log.inner_text()
        # Readable at this width: nothing makes the page scroll sideways.
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        shot(page, f"errno-1012-{name}")
        shot(page, f"errno-1012-{name}-full", full_page=True)


@pytest.mark.parametrize("name,viewport", [("laptop", LAPTOP), ("phone", PHONE)])
def test_search_shared_memory_finds_1012(browser, base_url, outside, name, viewport):
    with viewing(browser, base_url, outside, viewport) as page:
        page.goto(base_url + "/")
        hrefs = search(page, "shared memory")
        assert any("errno/1012/index.html" in h for h in hrefs), hrefs
        shot(page, f"search-shared-memory-{name}")
        page.locator(".md-search-result__link").first.click()
        page.wait_for_load_state()
        assert "/errno/1012/" in page.url


def _codes_with(phrase: str) -> set[int]:
    """The codes whose KB entry holds the phrase (in a message, pattern or text)."""
    found = set()
    for f in (ROOT / "kb").glob("[0-9]*.yaml"):
        body = f.read_text(encoding="utf-8").replace("\\", "")
        if phrase in body:
            found.add(int(f.name.split("-", 1)[0]))
    return found


@pytest.mark.parametrize("phrase", ["no kernel image", "Hardware limit", "is not in struct"])
def test_search_finds_a_page_from_words_of_a_log(browser, base_url, outside, phrase):
    codes = _codes_with(phrase)
    if not codes:
        pytest.skip(f"no KB entry holds {phrase!r} yet")
    with viewing(browser, base_url, outside, LAPTOP) as page:
        page.goto(base_url + "/")
        search(page, phrase)
        # The pages of the first screen of results (Material lists ten and loads more on scroll).
        first = [item.locator("a").first.get_attribute("href") or "" for item in page.locator("li.md-search-result__item").all()]
        pages = [int(m[1]) for h in first[:10] if (m := re.search(r"errno/(\d+)/index\.html", h))]
        assert set(pages) & codes, (phrase, pages)


@pytest.mark.parametrize("site", ["", "/zh"])
def test_every_page_fits_a_phone_width(browser, base_url, outside, site):
    """No page of either site scrolls sideways at 390 px, nor hides part of a line in a box that does."""
    with viewing(browser, base_url, outside, PHONE) as page:
        paths = ["/", "/errno/", "/p40-verl-gsm8k.html"] + [f"/errno/{f.name.split('-', 1)[0]}/" for f in sorted((ROOT / "kb").glob("[0-9]*.yaml"))]
        paths = [site + p for p in paths]
        wide = {}
        for path in paths:
            page.goto(base_url + path)
            if page.evaluate("document.documentElement.scrollWidth") > PHONE["width"] + 1:
                wide[path] = "page"
            boxes = page.evaluate("""Array.from(document.querySelectorAll('article .errmap-log, article li, article p'))
                .filter(e => e.scrollWidth > e.clientWidth + 2 && getComputedStyle(e).overflowX !== 'visible').length""")
            if boxes:
                wide[path] = f"{boxes} boxes"
    assert not wide, wide


def test_a_kb_title_and_group_show_as_text(browser, base_url, outside):
    """A user entry's HTML title and group: text in the menu, the header, <title> and the page; nothing runs."""
    with viewing(browser, base_url, outside, LAPTOP) as page:
        for path in ("/", "/errno/1012/", "/errno/9001/"):
            page.goto(base_url + path)
            page.wait_for_load_state("load")
            assert page.evaluate("window.pwned") is None, path
            # textContent: the link may be hidden inside a closed section of the menu.
            links = page.evaluate("""Array.from(document.querySelectorAll('nav.md-nav a'))
                .map(a => a.textContent.trim().replace(/\\s+/g, ' ')).filter(t => t.startsWith('9001'))""")
            assert links and set(links) == {HOSTILE_TITLE}, (path, links)
            assert page.locator("nav.md-nav b, nav.md-nav img, article b, article img").count() == 0, path
            assert "<img src=x" in page.locator("nav.md-nav").first.text_content(), path
        assert page.title() == HOSTILE_TITLE + " - errmap"
        assert page.locator("h1").inner_text().rstrip("¶").strip() == HOSTILE_TITLE
        assert page.locator(".md-header__topic").last.inner_text().strip() == HOSTILE_TITLE
        hrefs = search(page, "HOSTILESRV shard lost")
        assert "9001/index.html" in hrefs[0], hrefs
        first = page.locator(".md-search-result__item").first
        assert HOSTILE_TITLE in first.inner_text() and page.evaluate("window.pwned") is None


def test_a_page_from_the_file_system_says_search_needs_serve(browser, site_dir):
    context = browser.new_context(viewport=LAPTOP, service_workers="block")
    page = context.new_page()
    page.goto((site_dir / "index.html").as_uri())
    note = page.locator(".errmap-no-search")
    assert note.count() == 1 and "errmap docs serve" in note.inner_text()
    assert "errmap docs serve" in page.locator(".md-search__input").get_attribute("placeholder")
    page.goto((site_dir / "zh" / "index.html").as_uri())  # the Chinese site says it in Chinese
    assert page.locator(".errmap-no-search").inner_text().startswith("搜索需要通过 HTTP 访问站点")
    context.close()


def test_served_pages_carry_no_file_system_note(browser, base_url, outside):
    with viewing(browser, base_url, outside, LAPTOP) as page:
        page.goto(base_url + "/")
        assert page.locator(".errmap-no-search").count() == 0


def _first_page(page, words: str) -> int | None:
    """The errno of the first search result for words pasted into the box."""
    box = page.locator(".md-search__input")
    box.fill(words[:-1])
    box.press_sequentially(words[-1])  # the theme searches on a key typed
    try:
        page.wait_for_selector(".md-search-result__item", timeout=15000)
    except Exception:  # no result at all
        return None
    page.wait_for_timeout(500)  # the results of the last keystroke replace those of the one before
    hrefs = [a.get_attribute("href") or "" for a in page.locator(".md-search-result__link").all()]
    m = next((re.search(r"errno/(\d+)/index\.html", h) for h in hrefs), None)
    return int(m[1]) if m else None


def _misses(browser, base_url, outside, queries: list[tuple[str, int]], home: str = "/") -> dict:
    with viewing(browser, base_url, outside, LAPTOP) as page:
        page.goto(base_url + home)
        page.locator(".md-search__input").click()
        wrong = {}
        for words, errno in queries:
            got = _first_page(page, words)
            if got != errno:
                wrong[words] = (errno, got)
    return wrong


def test_a_pasted_log_line_finds_its_page_first(browser, base_url, outside):
    """A column name the pattern of 1033 lists ranks its page above pages that only share `KeyError`."""
    wrong = _misses(browser, base_url, outside, [("KeyError: prompt", 1033), ("No space left on device", 1024),
                                                 ("CUDA out of memory. Tried to allocate 20.00 MiB", 1017)])
    assert not wrong, wrong


def test_every_codes_first_message_finds_its_page_first(browser, base_url, outside):
    from errmap.kb import load as kbmod

    wrong = _misses(browser, base_url, outside, [(e.anchors[0].literals[0], e.errno) for e in kbmod.load()])
    assert not wrong, "\n".join(f"{words!r}: want {want}, first {got}" for words, (want, got) in wrong.items())
