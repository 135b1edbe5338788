"""The P40 walkthrough (docs/p40-verl-gsm8k.md and its Chinese twin docs/zh/p40-verl-gsm8k.md) must
say what errmap says: the fp32 keys of the KB's P40 step of 1009 and its doctor sentence, no fp16
rollout for the P40, pyarrow alone for `errmap doctor --data` (never the probes extra, which pins a
torch), and the HF rollout tied to verl < 0.6. Both languages must name the same keys, links and codes.
Real files only: the pages as written and the KB as errmap loads it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from errmap.kb import load as kbmod
from errmap.kb import model as kbmodel

ROOT = Path(__file__).resolve().parent.parent
PAGES = {"en": ROOT / "docs" / "p40-verl-gsm8k.md", "zh": ROOT / "docs" / "zh" / "p40-verl-gsm8k.md"}
CODE = re.compile(r"`([^`\n]+)`")
FP32_OR_ATTN = re.compile(r"\bfp32\b|\bfloat32\b|attn_implementation")
VERL_BEFORE_06 = re.compile(r"verl\s*<\s*0\.6(?![.\d]*\d)")
ROLLOUT_SETTING = "actor_rollout_ref.rollout.dtype"


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return {lang: path.read_text(encoding="utf-8") for lang, path in PAGES.items()}


@pytest.fixture(scope="module")
def bf16() -> kbmodel.Entry:
    kb = kbmod.load()
    entry = kb.get(1009)
    problems = [w for w in kb.warnings if "1009-" in w]
    assert entry is not None, "KB entry 1009 did not load:\n" + "\n".join(problems)
    return entry


def p40_step(entry: kbmodel.Entry) -> kbmodel.Step:
    """The verl step errmap shows on a GPU whose fp16 is slow (the P40)."""
    steps = [s for s in entry.fix if "slow-fp16" in s.gpu and "verl" in s.stack]
    assert len(steps) == 1, f"expected one verl step with gpu 'slow-fp16' in 1009, found {len(steps)}"
    return steps[0]


def fp32_keys(step: kbmodel.Step) -> list[str]:
    """Each backticked setting of the step that sets fp32/float32 or the attention implementation."""
    return [k for k in CODE.findall(step.text) if "=" in k and FP32_OR_ATTN.search(k)]


def doctor_sentence(entry: kbmodel.Entry) -> tuple[str, str]:
    """(setting, sentence) of the 1009 prediction on the rollout dtype: what `errmap doctor` says."""
    for p in entry.predicts:
        settings = [c.setting for c in p.when if c.setting]
        if ROLLOUT_SETTING in settings:
            says = p.says if isinstance(p.says, str) else " ".join(p.says.values())
            return ROLLOUT_SETTING, says
    raise AssertionError(f"1009 has no doctor prediction on {ROLLOUT_SETTING}")


def blocks(text: str) -> list[str]:
    """Paragraphs and list items: the unit a claim and its version condition must share."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        out += [b for b in re.split(r"\n(?=- )", para) if b.strip()]
    return out


def test_the_kb_step_has_the_p40_fp32_keys(bf16):
    keys = fp32_keys(p40_step(bf16))
    assert f"{ROLLOUT_SETTING}=float32" in keys
    assert any("param_dtype=fp32" in k for k in keys) and any("attn_implementation=" in k for k in keys)


@pytest.mark.parametrize("lang", PAGES)
def test_walkthrough_recommends_every_fp32_key_of_the_kb_step(bf16, pages, lang):
    spans = set(CODE.findall(pages[lang]))
    missing = [k for k in fp32_keys(p40_step(bf16)) if k not in spans]
    assert not missing, f"{PAGES[lang].relative_to(ROOT)} lacks the KB's P40 keys {missing}"


@pytest.mark.parametrize("lang", PAGES)
def test_walkthrough_matches_the_doctor_sentence(bf16, pages, lang):
    setting, says = doctor_sentence(bf16)
    # errmap doctor: float32 and fp32 on a GPU whose fp16 is slow, the P40 among them
    assert "float32" in says and "fp32" in says and "P40" in says, says
    assert f"`{setting}=float32`" in pages[lang]
    assert "errno/1009/index.md" in pages[lang]


@pytest.mark.parametrize("lang", PAGES)
def test_no_fp16_for_the_p40(pages, lang):
    text = pages[lang]
    assert "rollout.dtype=float16" not in text
    assert "param_dtype=fp16" not in text
    assert "--dtype=half" not in text and "--dtype half" not in text


@pytest.mark.parametrize("lang", PAGES)
def test_doctor_data_needs_only_pyarrow(pages, lang):
    text = pages[lang]
    assert "pip install pyarrow" in text
    assert "[probes]" not in text, "the probes extra pins torch and would replace the P40's CUDA build"


@pytest.mark.parametrize("lang", PAGES)
def test_hf_rollout_is_tied_to_verl_before_0_6(pages, lang):
    hf = [b for b in blocks(pages[lang]) if "rollout.name=hf" in b]
    assert hf, "the walkthrough no longer names the HF rollout"
    untied = [b for b in hf if not VERL_BEFORE_06.search(b)]
    assert not untied, "HF rollout named without 'verl < 0.6':\n" + "\n---\n".join(untied)


def test_no_vllm_upgrade_advice_for_pascal_shared_memory(pages):
    for lang, text in pages.items():
        assert "9999-11584.patch" in text and "BLOCK_M=128" in text, lang
        assert not re.search(r"(?i)upgrade (?:to )?(?:a )?vllm", text), lang
        assert "升级到包含" not in text and "升级 vLLM" not in text, lang


def test_both_languages_say_the_same(pages):
    def settings(text: str) -> set[str]:
        return {k for k in CODE.findall(text) if "=" in k}

    def codes(text: str) -> list[str]:
        return re.findall(r"\]\((errno/\d{4}/index\.md)\)", text)

    def urls(text: str) -> set[str]:
        return set(re.findall(r"<(https?://[^>\s]+)>", text))

    en, zh = pages["en"], pages["zh"]
    assert settings(en) == settings(zh), settings(en) ^ settings(zh)
    assert codes(en) == codes(zh)
    assert urls(en) == urls(zh), urls(en) ^ urls(zh)
    assert len(re.findall(r"^## ", en, re.M)) == len(re.findall(r"^## ", zh, re.M))


def test_every_code_linked_exists():
    for lang, path in PAGES.items():
        for n in re.findall(r"errno/(\d{4})/index\.md", path.read_text(encoding="utf-8")):
            assert list((ROOT / "kb").glob(f"{n}-*.yaml")), f"{lang}: links {n}, which has no KB entry"
