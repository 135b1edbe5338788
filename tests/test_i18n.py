"""Chinese output: the language choice, the gettext catalogue, the KB's kb/zh/ text and its check."""

from __future__ import annotations

import dataclasses
import json
import re

from rich.cells import cell_len

from conftest import ROOT, errmap
from errmap.report import i18n
from errmap.kb import translations
from errmap.kb import load as kbmod
from errmap.kb import files as kbfiles

P40_LOG = str(ROOT / "fixtures" / "1012" / "vllm-prefix-prefill-p40.log")
ZH = {"ERRMAP_LANG": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": "zh_CN.UTF-8"}


def test_language_from_the_environment():
    assert i18n.detect({"LANG": "zh_CN.UTF-8"}) == "zh"
    assert i18n.detect({"LANG": "zh_CN.UTF-8", "LC_ALL": "C"}) == "en"  # LC_ALL wins over LANG
    assert i18n.detect({"LANG": "en_US.UTF-8", "LC_MESSAGES": "zh_TW.UTF-8"}) == "zh"
    assert i18n.detect({"LANG": "zh_CN.UTF-8", "ERRMAP_LANG": "en"}) == "en"
    assert i18n.detect({}) == "en"


def test_scan_in_chinese_from_lang_and_english_unchanged():
    zh = errmap("scan", P40_LOG, env=ZH)
    out = zh.stdout.decode()
    assert zh.returncode == 1, zh.stderr.decode()
    assert "1 条诊断" in out and "根因在前" in out and "所需 GPU 共享内存超过上限" in out
    assert "每个线程块需要 65536 字节 GPU 共享内存" in out and "只允许 49152 字节" in out  # captures filled in
    assert "`TORCHDYNAMO_DISABLE=1`" in out  # config keys stay verbatim
    en = errmap("scan", P40_LOG, env={**ZH, "LANG": "C.UTF-8"}).stdout.decode()
    assert "1 diagnosis" in en and "Triton kernel needs more shared memory than the GPU has" in en
    assert not any("\u4e00" <= c <= "\u9fff" for c in en)
    assert errmap("scan", "--lang", "en", P40_LOG, env=ZH).stdout.decode() == en


def test_json_keeps_english_and_adds_chinese_only_when_asked():
    plain = json.loads(errmap("scan", "--format", "json", P40_LOG, env=ZH).stdout)
    zh = json.loads(errmap("scan", "--format", "json", "--lang", "zh", P40_LOG).stdout)
    d = zh["diagnoses"][0]
    assert d["title"] == plain["diagnoses"][0]["title"] == "Triton kernel needs more shared memory than the GPU has"
    assert "zh" not in plain["diagnoses"][0]
    assert "65536" in d["zh"]["cause"] and "共享内存" in d["zh"]["cause"] and len(d["zh"]["fix"]) == len(d["fix"])


def test_explain_and_help_in_chinese():
    out = errmap("explain", "1009", "--lang", "zh").stdout.decode()
    assert "在不支持 bf16 的 GPU 上请求了 bfloat16" in out and "修复方法" in out and "`actor_rollout_ref.rollout.dtype=float16`" in out
    help_zh = errmap("scan", "--lang", "zh", "--help").stdout.decode()
    assert "用法：" in help_zh and "选项" in help_zh and "退出码" in help_zh
    assert "Usage:" in errmap("scan", "--help").stdout.decode()


def _han(text: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" for c in text)


def _outside_block(out: str) -> list[str]:
    """The report's own lines: not the environment block between the ``` fences (probe facts)."""
    parts = out.split("```")
    return (parts[0] + "".join(parts[2:])).splitlines() if len(parts) >= 3 else out.splitlines()


def test_doctor_in_chinese_from_lang_and_english_unchanged():
    zh = errmap("doctor", "--", "trainer.n_gpus_per_node=8", env=ZH)
    out = zh.stdout.decode()
    assert zh.returncode in (0, 1), zh.stderr.decode()
    assert out.startswith("环境（提交 issue 时贴上这一段）")
    assert ("条警告：此配置会触发的错误码" in out and "errmap explain N 显示每个错误码的原因和修复方法。" in out) or "未发现此配置会触发的已知错误" in out
    en = errmap("doctor", "--", "trainer.n_gpus_per_node=8", env={**ZH, "LANG": "C.UTF-8"})
    text = en.stdout.decode()
    assert en.returncode == zh.returncode and text.startswith("Environment (paste this block into an issue)")
    assert ("warning" in text and "errmap explain N shows the cause and fix of each code." in text) or "No known failure predicted" in text
    assert not any(_han(line) for line in _outside_block(text))


def test_click_usage_errors_in_chinese_and_english_unchanged():
    zh = errmap("scan", "--no-such-option", P40_LOG, env=ZH)
    err = zh.stderr.decode()
    assert zh.returncode == 2 and zh.stdout == b""
    assert "用法：" in err and "查看帮助。" in err and "错误：没有选项 '--no-such-option'。" in err
    assert "Traceback" not in err and "Usage" not in err and "Error" not in err
    # --lang speaks for the line it is on, though click reads it after the whole line parses
    assert errmap("scan", "--lang", "zh", "--no-such-option", P40_LOG, env={**ZH, "LANG": "C"}).stderr.decode() == err
    missing = errmap("explain", env=ZH)
    assert missing.returncode == 2 and "错误：缺少参数 'QUERY'" in missing.stderr.decode()
    choice = errmap("scan", "--format", "xml", P40_LOG, env=ZH).stderr.decode()
    assert "'--format' 的值无效：'xml' 不是 " in choice and "之一。" in choice
    en = errmap("scan", "--no-such-option", P40_LOG, env={**ZH, "LANG": "C.UTF-8"})
    text = en.stderr.decode()
    assert en.returncode == 2 and "Usage:" in text and "Error: No such option '--no-such-option'." in text
    assert not _han(text)


def test_cjk_columns_line_up_at_80():
    out = errmap("scan", "-v", "--lang", "zh", P40_LOG, env={"COLUMNS": "80"}).stdout.decode()
    links = [line for line in out.splitlines() if "https://" in line]
    assert len(links) == 6 and all(cell_len(line) <= 80 for line in out.splitlines())
    starts = {cell_len(line[: line.index("https://")]) for line in links}
    assert len(starts) == 1, links  # 补丁 (4 cells) and issue (5 cells) pad to the same column


def _kb():
    return kbmod.load()


def test_every_code_has_chinese_text_that_matches_the_english():
    kb = _kb()
    glossary = translations.Glossary.load(kbfiles.official_dir() / "glossary.yaml")
    assert set(kb.zh) == set(kb.entries) and len(kb.entries) == 48
    problems = [p for e in kb for p in translations.problems(e, kb.zh.get(e.errno), glossary)]
    assert problems == []


def test_check_catches_missing_text_placeholders_code_spans_and_glossary():
    kb = _kb()
    glossary = translations.Glossary.load(kbfiles.official_dir() / "glossary.yaml")
    e, text = kb.entries[1012], kb.zh[1012]
    assert translations.problems(e, None)[0].startswith("1012-triton-shared-memory: no Chinese text")
    bad = dataclasses.replace(text, cause=text.cause.replace("{required}", "N"))
    assert any("placeholders" in p for p in translations.problems(e, bad, glossary))
    bad = dataclasses.replace(text, fix=(text.fix[0].replace("`actor_rollout_ref.model.use_fused_kernels=False`", "关闭 fused kernel"), *text.fix[1:]))
    assert any("code spans differ" in p and "use_fused_kernels" in p for p in translations.problems(e, bad, glossary))
    bad = dataclasses.replace(text, fix=text.fix[:-1])
    assert any(f"fix has {len(e.fix) - 1} steps, the English {len(e.fix)}" in p for p in translations.problems(e, bad, glossary))
    bad = dataclasses.replace(text, cause="", says=())
    found = translations.problems(e, bad, glossary)
    assert any(p.endswith(": no cause") for p in found) and any(p.endswith(": no says") for p in found)
    bad = dataclasses.replace(text, summary=text.summary.replace("共享内存", "分享内存"))
    found = translations.problems(e, bad, glossary)
    assert any("'分享内存' is not the glossary's term" in p for p in found)
    assert any("use the glossary's '共享内存'" in p for p in found)
    bad = dataclasses.replace(text, links=text.links[:-1])
    assert any(f"links has {len(e.links) - 1} titles, the English entry {len(e.links)} links" in p
               for p in translations.problems(e, bad, glossary))
    bad = dataclasses.replace(text, links=())
    assert any(p.endswith(": no links") for p in translations.problems(e, bad, glossary))
    bad = dataclasses.replace(text, links=(e.links[0].title, *text.links[1:]))  # left in English
    assert any("link 1: no Chinese in it" in p for p in translations.problems(e, bad, glossary))


def test_a_broken_sidecar_names_its_file_and_line(tmp_path):
    (tmp_path / "zh").mkdir()
    side = tmp_path / "zh" / "9001-x.yaml"
    side.write_text("title: 标题\ngroup: 分组\nsummary: 这是一段概要文字\nwrong: 1\n", encoding="utf-8")
    texts, problems = translations.load_dir(tmp_path)
    assert texts == {} and problems == [f"{side}:4: wrong: Extra inputs are not permitted"]


def test_a_sidecars_search_words_are_checked(tmp_path):
    """`search`: the words users type for a code, each written once, none blank."""
    (tmp_path / "zh").mkdir()
    side = tmp_path / "zh" / "9001-x.yaml"
    side.write_text("title: 标题\ngroup: 分组\nsummary: 这是一段概要文字\nsearch: [爆显存, ' ']\n", encoding="utf-8")
    texts, problems = translations.load_dir(tmp_path)
    assert texts == {} and len(problems) == 1 and problems[0].startswith(f"{side}:4: search.1: String should")
    kb = _kb()
    assert "爆显存" in kb.zh[1017].search and "断点续训" in kb.zh[1046].search
    twice = dataclasses.replace(kb.zh[1017], search=("爆显存", "OOM", "爆显存"))
    assert any(p.endswith("search: ['爆显存'] listed twice") for p in translations.problems(kb.entries[1017], twice))


def test_catalogue_covers_every_help_text():
    from errmap.commands.cli import main

    i18n.set_language("en")  # the texts as written (click's --help text is looked up when it is made)
    try:
        texts = i18n.help_texts(main)
        i18n.set_language("zh")
        missing = [t for t in texts if i18n._(t) == t]
    finally:
        i18n.set_language(None)
    assert missing == []


def test_doctor_warnings_in_chinese_with_the_same_values():
    args = ("doctor", "--", "data.max_prompt_length=4096", "data.max_response_length=8192", "trainer.n_gpus_per_node=0")
    zh = errmap(*args, env={**ZH, "COLUMNS": "200"}, timeout=300)
    out = " ".join(zh.stdout.decode().split("```")[-1].split())
    assert zh.returncode == 1, zh.stderr.decode()
    assert ("actor_rollout_ref.rollout.max_num_batched_tokens=8192（verl 的默认值） 小于序列长度 12288"
            "（data.max_prompt_length + data.max_response_length = 4096 + 8192）：至少调到 12288") in out
    assert "is below" not in out and "verl default" not in out
    en = " ".join(errmap(*args, env={"COLUMNS": "200"}, timeout=300).stdout.decode().split("```")[-1].split())
    assert "max_num_batched_tokens=8192 (verl default) is below the sequence length 12288" in en and not _han(en)
    doc = json.loads(errmap("doctor", "--format", "json", "--lang", "zh", *args[1:], timeout=300).stdout)
    (w,) = [w for w in doc["warnings"] if w["errno"] == 1040]
    assert "(verl default) is below" in w["says"] and not _han(w["title"])
    assert w["zh"]["says"].startswith("actor_rollout_ref.rollout.max_num_batched_tokens=8192（verl 的默认值） 小于")
    assert _han(w["zh"]["title"])
    plain = json.loads(errmap("doctor", "--format", "json", *args[1:], env=ZH, timeout=300).stdout)
    assert all("zh" not in w for w in plain["warnings"])  # the locale alone keeps JSON English


def test_run_says_how_the_command_ended_in_chinese():
    zh = errmap("run", "--", "bash", "-c", "echo hi; kill -9 $$", env=ZH)
    err = "".join(zh.stderr.decode().split())
    assert zh.returncode == 137 and zh.stdout == b"hi\n"
    assert "命令失败，退出码137（被SIGKILL终止）；输出中没有已知原因。" in err
    assert "可能的原因：1021主机内存耗尽" in err and "errmapexplain1021" in err
    assert "errmap汇总" in err and not any(w in err for w in ("Likely", "failed", "summary", "status"))


def test_explain_labels_in_chinese():
    out = errmap("explain", "1009", "--lang", "zh", env={"COLUMNS": "200"}).stdout.decode()
    lines = out.splitlines()
    assert lines[0].endswith("· 根因") and "\n    正则 " in out and "已确认的条件：" in out
    assert "相关：" in out and "Any run" not in out and "pattern" not in out and "confirmed when" not in out
    assert "适用于： " not in out and "相关： " not in out and "适用于：" in out  # no space after a full-width colon
    assert "（仅适用于" in out and "(仅" not in out and "(不" not in out  # a step's GPU condition
    en = errmap("explain", "1009", env={"COLUMNS": "200"}).stdout.decode()
    assert en.splitlines()[0].endswith("· root") and "confirmed when" in en and not _han(en)


def test_chinese_report_uses_full_width_parentheses_and_separators():
    out = errmap("scan", "--lang", "zh", str(ROOT / "fixtures" / "1031" / "gpu-gloo-oom-cascade.log"), env={"COLUMNS": "200"}).stdout.decode()
    lines = out.splitlines()
    assert lines[0].startswith("1 条诊断（") and lines[0].endswith("；根因在前）") and "; " not in lines[0]
    assert "失败（3 次；首次出现于 " in out and "另外还出现知识库未收录的错误（1）" in out
    many = errmap("scan", "--lang", "zh", str(ROOT / "fixtures" / "1017" / "verl-log-prob-oom.log"), env={"COLUMNS": "200"}).stdout.decode()
    assert re.search(r"（还有 \d+ 步）", many), many  # the steps left out, in full-width parentheses
    en = errmap("scan", str(ROOT / "fixtures" / "1031" / "gpu-gloo-oom-cascade.log"), env={"COLUMNS": "200"}).stdout.decode()
    assert en.splitlines()[0].startswith("1 diagnosis (") and "failed (3x; first at " in en


def test_catalogue_defines_each_message_once():
    import collections
    import re

    po = (i18n.LOCALE_DIR / "zh" / "LC_MESSAGES" / "errmap.po").read_text(encoding="utf-8")
    ids = re.findall(r'^msgid ((?:".*"\n)+)', po, re.M)  # GNU msgfmt refuses a catalogue with one twice
    assert [m for m, k in collections.Counter(ids).items() if k > 1] == []


def test_what_each_probe_reads_is_said_in_chinese_in_explain_and_on_the_site():
    from pathlib import Path

    from errmap.commands import docs
    from errmap.scan.matcher import Matcher
    from errmap.probes import PROBES

    i18n.set_language("zh")
    try:
        assert [d for d in PROBES.values() if not _han(i18n._(d))] == []  # a new probe needs its Chinese text
        kb = docs.load_kb(ROOT, "zh")
        page = docs.errno_page(kb.get(1012), kb, Matcher(kb), ROOT / "fixtures")
    finally:
        i18n.set_language(None)
    confirms = page.split("## errmap 如何确认")[1].split("\n## ")[0]
    assert "reads these facts" not in confirms and " when " not in confirms and "in bytes" not in confirms
    assert "**已确认**的条件：" in confirms and "共享内存" in confirms
    out = errmap("explain", "1012", "--lang", "zh", env={"COLUMNS": "200"}).stdout.decode()
    assert "gpu.shared_memory：每块可见 GPU 每个线程块可申请" in out
    assert "为 Pascal 调小 prefix-prefill 的块大小" in out  # the links' titles too
    en = errmap("explain", "1012", env={"COLUMNS": "200"}).stdout.decode()
    assert "gpu.shared_memory: opt-in shared memory per block of each visible GPU, in bytes" in en
