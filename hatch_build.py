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
            # An editable install imports the package from the checkout: the .mo goes beside the .po there.
            base = Path(self.root) if version == "editable" else out
            mo = base / po.relative_to(self.root).with_suffix(".mo")
            mo.parent.mkdir(parents=True, exist_ok=True)
            with mo.open("wb") as fh:
                write_mo(fh, catalog)
            if version != "editable":
                build_data["force_include"][str(mo)] = str(po.relative_to(self.root).with_suffix(".mo"))
