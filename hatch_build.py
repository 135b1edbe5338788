"""Wheel build hook: compile the gettext catalogues (errmap/locale/*/LC_MESSAGES/*.po) to .mo with
Babel, so an installed errmap reads its Chinese messages without Babel at run time."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class LocaleBuildHook(BuildHookInterface):
    PLUGIN_NAME = "locale"

    def initialize(self, version: str, build_data: dict) -> None:
        from babel.messages.mofile import write_mo
        from babel.messages.pofile import read_po

        out = Path(tempfile.mkdtemp(prefix="errmap-mo-"))
        for po in Path(self.root, "errmap", "locale").glob("*/LC_MESSAGES/*.po"):
            with po.open("rb") as fh:
                catalog = read_po(fh)
            mo = out / po.relative_to(self.root).with_suffix(".mo")
            mo.parent.mkdir(parents=True, exist_ok=True)
            with mo.open("wb") as fh:
                write_mo(fh, catalog)
            build_data["force_include"][str(mo)] = str(po.relative_to(self.root).with_suffix(".mo"))
