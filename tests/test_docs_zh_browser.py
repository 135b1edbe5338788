"""The Chinese docs site (site/zh/, mkdocs.zh.yml) in the real browser: the 1012 page in Chinese, the
language switch both ways, Chinese searches, no sideways scroll at 390 px. Screenshots go to artifacts/."""

from __future__ import annotations

import re

import pytest

from test_docs_browser import LAPTOP, PHONE, _misses, base_url, browser, outside, search, shot, site_dir, viewing  # noqa: F401
from errmap.report.i18n import _, set_language
from errmap.commands.sections import SECTIONS


def _zh_sections() -> list[str]:
    set_language("zh")
    try:
        return [_(s) for s in SECTIONS]
    finally:
        set_language(None)


@pytest.mark.parametrize("name,viewport", [("laptop", LAPTOP), ("phone", PHONE)])
def test_1012_page_in_chinese_and_the_switch(browser, base_url, outside, name, viewport):
    with viewing(browser, base_url, outside, viewport) as page:
        page.goto(base_url + "/zh/errno/1012/index.html")
        assert page.locator("h1").inner_text().startswith("1012 · Triton kernel 所需 GPU 共享内存超过上限")
        titles = [t.strip().rstrip("¶").strip() for t in page.locator("article h2").all_inner_texts()]
        assert titles == _zh_sections()
        assert page.locator("article code", has_text="actor_rollout_ref.actor.use_torch_compile=False").count() >= 1
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        shot(page, f"zh-errno-1012-{name}")
        english = page.locator('a.md-select__link[hreflang="en"]').get_attribute("href")
        page.goto(page.url.rsplit("/", 1)[0] + "/" + english)
        assert "/zh/" not in page.url and page.url.endswith("/errno/1012/index.html")
        assert page.locator("h1").inner_text().startswith("1012 · Triton kernel needs more shared memory")
        chinese = page.locator('a.md-select__link[hreflang="zh"]').get_attribute("href")
        page.goto(page.url.rsplit("/", 1)[0] + "/" + chinese)
        assert page.url.endswith("/zh/errno/1012/index.html")


@pytest.mark.parametrize("words,errno", [("共享内存", 1012), ("显存不足", 1017)])
def test_chinese_search_finds_its_page_first(browser, base_url, outside, words, errno):
    with viewing(browser, base_url, outside, PHONE) as page:
        page.goto(base_url + "/zh/index.html")
        hrefs = search(page, words)
        assert f"errno/{errno}/index.html" in hrefs[0], hrefs[:5]
        shot(page, f"zh-search-{errno}-phone")


def _result_pages(page, words: str) -> list:
    """The pages the search box lists for words typed into it, best first: a code's errno, else the path."""
    box = page.locator(".md-search__input")
    box.fill(words)
    box.press("End")  # the theme searches on a key typed (an input method commits Chinese with one)
    try:
        page.wait_for_selector(".md-search-result__item", timeout=5000)
    except Exception:  # no result at all
        return []
    page.wait_for_timeout(500)  # the results of the last keystroke replace those of the one before
    hrefs = [(a.get_attribute("href") or "").split("?")[0] for a in page.locator(".md-search-result__link").all()]
    return list(dict.fromkeys(int(m[1]) if (m := re.search(r"errno/(\d+)/index\.html", h)) else h for h in hrefs))


# What Chinese users type, with and without a space where Chinese meets Latin letters, and words of
# their own for an error (kb/zh `search`: 爆显存, 断点续训): each finds its code first.
TYPED = [("找不到 prompt 列", 1033), ("找不到prompt列", 1033), ("不支持 bf16", 1009), ("不支持bf16", 1009),
         ("训练时 OOM", 1017), ("训练时OOM", 1017), ("爆显存", 1017), ("断点续训", 1046)]


def test_what_chinese_users_type_finds_its_code_first(browser, base_url, outside):
    from errmap.kb import load as kbmod

    with viewing(browser, base_url, outside, LAPTOP) as page:
        page.goto(base_url + "/zh/index.html")
        page.locator(".md-search__input").click()
        found = {words: _result_pages(page, words) for words, _errno in TYPED}
        shared = _result_pages(page, "共享内存不足")
        capability = _result_pages(page, "算力")
    wrong = {words: found[words][:3] for words, errno in TYPED if found[words][:1] != [errno]}
    assert not wrong, wrong
    # GPU shared memory (1012) and /dev/shm (1022) both go by 共享内存: a user short of it may mean either.
    assert set(shared[:2]) == {1012, 1022}, shared[:5]
    # 算力 is what users call a GPU's compute capability.
    codes = {e.errno for e in kbmod.load() if "compute capability" in f"{e.title} {e.summary} {e.cause}".lower()}
    assert capability and capability[0] in codes, (capability[:5], sorted(codes))


def test_pasted_english_message_still_finds_1012_on_the_chinese_site(browser, base_url, outside):
    with viewing(browser, base_url, outside, LAPTOP) as page:
        page.goto(base_url + "/zh/index.html")
        hrefs = search(page, "out of resource: shared memory")
        assert "errno/1012/index.html" in hrefs[0], hrefs[:5]


def test_every_codes_first_message_finds_its_page_first_on_the_chinese_site(browser, base_url, outside):
    """A pasted English message finds its page on the Chinese site as on the English one."""
    from errmap.kb import load as kbmod

    wrong = _misses(browser, base_url, outside, [(e.anchors[0].literals[0], e.errno) for e in kbmod.load()], "/zh/")
    assert not wrong, "\n".join(f"{words!r}: want {want}, first {got}" for words, (want, got) in wrong.items())


def test_p40_page_fits_a_phone(browser, base_url, outside):
    with viewing(browser, base_url, outside, PHONE) as page:
        page.goto(base_url + "/zh/p40-verl-gsm8k.html")
        assert "P40" in page.locator("h1").inner_text()
        assert page.locator("article table code", has_text="data_source").count() == 1
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        shot(page, "zh-p40-phone", full_page=True)


def test_p40_page_in_both_languages_and_the_switch(browser, base_url, outside):
    """The walk-through is in the English navigation, and the switch goes to the same page both ways."""
    with viewing(browser, base_url, outside, LAPTOP) as page:
        page.goto(base_url + "/index.html")
        page.locator('nav.md-nav a[href$="p40-verl-gsm8k.html"]').first.click()
        page.wait_for_load_state()
        assert page.url.endswith("/p40-verl-gsm8k.html") and "/zh/" not in page.url
        assert page.locator("h1").inner_text().startswith("verl PPO on GSM8K on a single Tesla P40")
        # verl's own layout, not the tutorials' prompt/chosen
        columns = [c.strip() for c in page.locator("article table tbody tr td:first-child").all_inner_texts()]
        assert columns == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        chinese = page.locator('a.md-select__link[hreflang="zh"]').get_attribute("href")
        page.goto(page.url.rsplit("/", 1)[0] + "/" + chinese)
        assert page.url.endswith("/zh/p40-verl-gsm8k.html")
        assert page.locator("h1").inner_text().startswith("单卡 Tesla P40 上跑 verl PPO")
        english = page.locator('a.md-select__link[hreflang="en"]').get_attribute("href")
        page.goto(page.url.rsplit("/", 1)[0] + "/" + english)
        assert page.url.endswith("/p40-verl-gsm8k.html") and "/zh/" not in page.url
        assert page.locator("h1").inner_text().startswith("verl PPO on GSM8K")
