"""The language errmap speaks to people: English or Chinese (zh).

The terminal's words come from a standard gettext catalogue, errmap/locale/zh/LC_MESSAGES/errmap.po:
an installed package reads the errmap.mo that the wheel build compiles from it (hatch_build.py), a
checkout reads the .po itself through Babel (a dev dependency). The KB's Chinese text is data in
kb/zh/ (errmap.translations). JSON and SARIF keep their English keys whatever the language.

The language is `--lang` when given, else ERRMAP_LANG, else the first of LC_ALL, LC_MESSAGES and
LANG that is set (POSIX order): `zh_CN.UTF-8`, `zh_TW`, `zh` mean Chinese, anything else English.
"""

from __future__ import annotations

import gettext
import inspect
import os
from functools import cache
from pathlib import Path

import click

LANGS = ("en", "zh")
DOMAIN = "errmap"
LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"
_lang: str | None = None


def detect(environ: os._Environ | dict[str, str] = os.environ) -> str:
    """The language the environment asks for."""
    if (explicit := environ.get("ERRMAP_LANG", "").strip().lower()) in LANGS:
        return explicit
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        if value := environ.get(name, "").strip():
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def language() -> str:
    return _lang or detect()


def asked() -> str | None:
    """The language asked for by name (--lang, ERRMAP_LANG), not taken from the locale: machine
    formats add their Chinese fields only then."""
    return _lang or (os.environ.get("ERRMAP_LANG", "").strip().lower() if os.environ.get("ERRMAP_LANG", "").strip().lower() in LANGS else None)


def set_language(lang: str | None) -> None:
    global _lang
    _lang = lang


@cache
def _catalog(lang: str) -> gettext.NullTranslations:
    if lang == "en":
        return gettext.NullTranslations()
    mo = LOCALE_DIR / lang / "LC_MESSAGES" / f"{DOMAIN}.mo"
    po = mo.with_suffix(".po")
    if mo.is_file() and (not po.is_file() or mo.stat().st_mtime >= po.stat().st_mtime):
        with mo.open("rb") as fh:
            return gettext.GNUTranslations(fh)
    try:
        from babel.messages.pofile import read_po
    except ImportError:  # a checkout without the dev extra: English rather than nothing
        return gettext.NullTranslations()
    if not po.is_file():
        return gettext.NullTranslations()
    with po.open("rb") as fh:
        catalog = read_po(fh)
    return _PoTranslations({m.id: m.string for m in catalog if m.id and m.string and not m.fuzzy})


class _PoTranslations(gettext.NullTranslations):
    """A catalogue read from the .po: singular messages and (msgid, msgid_plural) pairs."""

    def __init__(self, messages: dict):
        super().__init__()
        self._messages = messages

    def gettext(self, message: str) -> str:
        return self._messages.get(message) or message

    def ngettext(self, singular: str, plural: str, n: int) -> str:
        found = self._messages.get((singular, plural))
        if found:
            return found[0] if isinstance(found, (list, tuple)) else found
        return singular if n == 1 else plural


def _(message: str) -> str:
    """The message in the current language (its English text when there is no translation)."""
    return _catalog(language()).gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    return _catalog(language()).ngettext(singular, plural, n)


def pad(text: str, width: int) -> str:
    """`text` padded to `width` terminal cells: a Chinese character takes two."""
    from rich.cells import cell_len

    return text + " " * max(0, width - cell_len(text))


# ---------------------------------------------------------------- the command line


def _set_from_option(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        set_language(value)


LANG_HELP = "Language of the output: zh or en (default: ERRMAP_LANG, else LC_ALL, LC_MESSAGES, LANG)."


def lang_option() -> click.Option:
    # Eager, so `--lang zh --help` shows the help in Chinese.
    return click.Option(["--lang"], type=click.Choice(LANGS), default=None, is_eager=True, expose_value=False,
                        callback=_set_from_option, help=LANG_HELP)


class _Formatter(click.HelpFormatter):
    """Click's help layout with errmap's catalogue for the headings click itself writes."""

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        super().write_usage(prog, args, prefix if prefix is not None else _("Usage: "))

    def section(self, name: str):
        return super().section(_(name))

    def write_heading(self, heading: str) -> None:  # click's own writes a half-width colon
        self.write(f"{'':>{self.current_indent}}{heading}{_(':')}\n")


class _Context(click.Context):
    formatter_class = _Formatter


class _Translated:
    """A command whose help texts are looked up in the catalogue when they are shown."""

    context_class = _Context

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.params.append(lang_option())

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # --lang speaks for the errors of the line it is on too, though click reads it only after
        # the whole line parses: `--lang zh --no-such-option` says so in Chinese.
        words = args[: args.index("--")] if "--" in args else args
        for i, word in enumerate(words):
            value = word[7:] if word.startswith("--lang=") else words[i + 1] if word == "--lang" and i + 1 < len(words) else None
            if value in LANGS:
                set_language(value)
        return super().parse_args(ctx, args)

    def _swapped(self, ctx: click.Context):
        saved = [(self, self.help), *((p, getattr(p, "help", None)) for p in self.get_params(ctx))]
        for obj, text in saved:
            if text:
                obj.help = _(inspect.cleandoc(text))
        return saved

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        saved = self._swapped(ctx)
        try:
            super().format_help(ctx, formatter)
        finally:
            for obj, text in saved:
                obj.help = text

    def get_short_help_str(self, limit: int = 45) -> str:
        if self.help and language() != "en":
            first = inspect.cleandoc(self.help).split("\n\n")[0]
            return _(first) if _(first) != first else super().get_short_help_str(limit)
        return super().get_short_help_str(limit)


class Command(_Translated, click.Command):
    pass


class Group(_Translated, click.Group):
    command_class = Command
    group_class = type  # subgroups are of this class too


def speak_for_click() -> None:
    """Click writes its own words (Usage:, Error: ..., No such option ...) through the standard
    library's gettext functions, which each of its modules binds as `_` and `ngettext` when it is
    imported; it has no other hook. Bind errmap's catalogue there instead, so they follow --lang and
    the locale as errmap's own words do (errmap.po holds click's messages too)."""
    import click.core
    import click.decorators
    import click.exceptions
    import click.formatting
    import click.parser
    import click.termui
    import click.types

    for module in (click.core, click.decorators, click.exceptions, click.formatting, click.parser, click.termui, click.types):
        if hasattr(module, "_"):
            module._ = _
        if hasattr(module, "ngettext"):
            module.ngettext = ngettext


def help_texts(group: click.Group) -> list[str]:
    """Every help text of the command tree, as the catalogue's msgids: what the help shows."""
    out: list[str] = []

    def walk(cmd: click.Command, ctx: click.Context) -> None:
        for text in [cmd.help, *(getattr(p, "help", None) for p in cmd.get_params(ctx))]:
            if text:
                cleaned = inspect.cleandoc(text)
                out.extend([cleaned, cleaned.split("\n\n")[0]])
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                walk(sub, click.Context(sub, parent=ctx, info_name=name))

    walk(group, click.Context(group, info_name="errmap"))
    return list(dict.fromkeys(out))
