"""errmap's Chinese: the glossary's terms hold over every Chinese text (the KB's kb/zh/, the catalogue, docs/zh/,
the generated pages), and what scan, explain, doctor and run print in Chinese holds no English prose outside
code, keys, paths, URLs, log lines and the names of products."""

from __future__ import annotations

import html
import os
import subprocess
import sys

import pytest
import regex

from conftest import FIXTURES, ROOT, errmap
from errmap.kb import files as kbfiles
from errmap.kb import translations
from errmap.report import i18n

ZH = {"ERRMAP_LANG": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": "zh_CN.UTF-8", "COLUMNS": "400"}  # no wrapping


@pytest.fixture(scope="module")
def glossary() -> translations.Glossary:
    return translations.Glossary.load(kbfiles.official_dir() / "glossary.yaml")


def _catalogue() -> list[str]:
    from babel.messages.pofile import read_po

    with (i18n.LOCALE_DIR / "zh" / "LC_MESSAGES" / "errmap.po").open("rb") as fh:
        messages = [m.string for m in read_po(fh) if m.id]
    return [s for m in messages for s in (m if isinstance(m, (list, tuple)) else [m]) if s]


@pytest.fixture(scope="module")
def chinese_pages() -> dict[str, str]:
    """The generated pages of the Chinese site, as the docs hook makes them."""
    from errmap.commands import docs

    i18n.set_language("zh")
    try:
        return docs.pages(docs.load_kb(ROOT, "zh"), FIXTURES)
    finally:
        i18n.set_language(None)


def test_the_glossary_holds_over_every_chinese_text(glossary, chinese_pages):
    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
             for p in [*sorted((ROOT / "kb" / "zh").glob("*.yaml")), *sorted((ROOT / "docs" / "zh").glob("*.md"))]}
    texts |= {f"errmap.po: {s[:40]}": s for s in _catalogue()}
    # A page's code is HTML there: <code> and the example log's <pre> are not its prose.
    texts |= {f"generated {uri}": html.unescape(regex.sub(r"(?s)<(code|pre)>.*?</\1>", " ", page))
              for uri, page in chinese_pages.items()}
    found = [f"{where}: {words!r} (use {term.zh!r})" for where, text in texts.items() for words, term in glossary.avoided(text)]
    assert found == []


def test_the_glossary_finds_a_word_it_avoids_but_not_in_code(glossary):
    assert [t.zh for _w, t in glossary.avoided("安装 PyTorch 的 cu126 构建；另见知识库中没有的错误")] == ["版 wheel", "另外还出现知识库未收录的错误"]
    assert glossary.avoided("`vllm_mode=\"colocate\"`，用 CUDA 12.8 构建的 wheel，构建模型时") == []


def test_an_entry_that_says_shared_memory_says_which():
    """GPU shared memory (1012) and /dev/shm (1022) are both 共享内存 in Chinese: each entry says which."""
    for side in sorted((ROOT / "kb" / "zh").glob("*.yaml")):
        text = side.read_text(encoding="utf-8")
        if "共享内存" in text:
            assert "GPU 共享内存" in text or "/dev/shm 共享内存" in text, side.name


# ---------------------------------------------------------------- no English prose in the Chinese output

# What is not prose: code spans, URLs, quoted text (a message), <placeholders>, anything holding a path, key,
# version or number, options, and errmap's own commands.
NOT_PROSE = regex.compile(r"""`[^`]*`|https?://\S+|'[^'\n]*'|"[^"\n]*"|“[^”]*”|<[^<>\n]*>|errmap [a-z]+"""
                          r"""|\S*[/._=\\@#$%^*+~|\d][^\s，。；：、（）]*|--?[A-Za-z][\w-]*""")
# Three or more English words in a row.
PROSE = regex.compile(r"(?<![\w-])[A-Za-z][a-z]+(?:-[a-z]+)*(?: [A-Za-z][a-z]+(?:-[a-z]+)*){2,}(?![\w-])")
NAMES = ("Hugging Face Hub",)  # products whose names are three words
# A log line, an evidence line or a line of an example log: what the software printed.
LOG_LINE = regex.compile(r"^\s*(?:│|▶|\d+ {2})|^\s+\S+:\d+")


@pytest.fixture(scope="module")
def quoted() -> str:
    """What real software prints, which Chinese text quotes as it is: the fixture logs, the KB's messages
    and the titles of the threads it links (an issue's title is often its message)."""
    from errmap.kb import load

    kb = load.load()
    parts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(FIXTURES.glob("*/*.log"))]
    parts += [t for e in kb for a in e.anchors for t in (*a.literals, a.regex, a.source)]
    return "\n".join(parts + [link.title for e in kb for link in e.links])


def english_prose(out: str, quoted: str) -> list[str]:
    """The runs of English words of an output that are none of the above; the matched messages of explain
    (its last section, the rules errmap matches) are log text too."""
    found, rules = [], False
    for line in out.splitlines():
        if line and not line.startswith(" "):  # a heading
            rules = line.startswith(i18n._catalog("zh").gettext("Messages it matches"))
        if rules or LOG_LINE.match(line):
            continue
        bare = NOT_PROSE.sub(" \0 ", line)
        found += [f"{m[0]!r} in {line.strip()[:120]!r}" for m in PROSE.finditer(bare)
                  if m[0] not in quoted and m[0] not in NAMES]
    return found


def test_the_detector_finds_english_labels_and_passes_code_and_quotes(quoted):
    assert english_prose("  复现方式：sed 's/^/x/' (the prefix docker compose puts before each line) of a.log", quoted) != []
    assert english_prose("   更多：`errmap explain 1012` 和 errmap doctor --data x.parquet；报 \"no kernel image\"", quoted) == []
    assert english_prose("   /work/a.log:18\n   │ RuntimeError: out of memory for all of it", quoted) == []


def _in_chinese(*args: str, timeout: float = 300) -> str:
    proc = errmap(*args, env=ZH, timeout=timeout)
    assert proc.returncode in (0, 1), proc.stderr.decode()
    return proc.stdout.decode() + proc.stderr.decode()


def test_scan_of_every_fixture_in_chinese_has_no_english_prose(quoted):
    out = _in_chinese("scan", "--verbose", *map(str, sorted(FIXTURES.glob("*/*.log"))))
    assert "根因在前" in out
    assert english_prose(out, quoted) == []


def test_explain_of_every_code_in_chinese_has_no_english_prose(quoted):
    # One process explains every code, through the command line's own entry point.
    code = ("from errmap.commands.cli import main\n"
            "for n in range(1001, 1049):\n"
            "    try: main(['explain', str(n)], standalone_mode=False)\n"
            "    except SystemExit: pass\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300, cwd=ROOT, env={**os.environ, **ZH})
    out = proc.stdout.decode()
    assert proc.returncode == 0 and out.count("\n修复方法\n") == 48, proc.stderr.decode()[-2000:]
    assert english_prose(out, quoted) == []


def test_doctor_and_run_in_chinese_have_no_english_prose(quoted, tmp_path):
    doctor = _in_chinese("doctor", "--", "trainer.n_gpus_per_node=0", "data.max_prompt_length=4096",
                         "data.max_response_length=8192", "data.train_files=/nonexistent/train.parquet")
    report = doctor.split("```")[-1]  # the environment block above it is the machine's own words
    assert "errmap explain N" in report
    assert english_prose(report, quoted) == []
    # vLLM's server banner (vllm/entrypoints/openai/api_server.py), then Triton's message (triton/runtime/errors.py)
    (tmp_path / "serve.log").write_text(
        "vLLM API server version 0.10.2\n"
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, Hardware limit: 65536. "
        "Reducing block sizes or `num_stages` may help.\n", encoding="utf-8")
    proc = errmap("run", "--", "cat", str(tmp_path / "serve.log"), env=ZH)
    said = proc.stderr.decode()
    assert "命令输出:2" in said and "vLLM / SGLang 推理服务" in said, said
    assert english_prose(said, quoted) == []


def test_the_catalogue_punctuates_as_chinese():
    """Full-width colons after Chinese, no space between a full stop and a parenthesis, a space between Chinese
    and a code span or a Latin word (a {placeholder} is filled with either), and click's headings end in '：'."""
    faults = {"a half-width colon or comma after Chinese": r"\p{Han}[:,;?!]", "a space after Chinese punctuation": r"[。，；：] [（(]",
              "Chinese against a code span or Latin word": r"\p{Han}[`A-Za-z]|[`A-Za-z]\p{Han}"}
    found = [f"{name}: {s!r}" for s in _catalogue() for name, fault in faults.items() if regex.search(fault, s)]
    assert found == []
    help_zh = errmap("scan", "--lang", "zh", "--help").stdout.decode()
    assert "\n选项：\n" in help_zh and "选项:" not in help_zh
