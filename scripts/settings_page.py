"""Write the settings sections of ``docs/reference/settings.md`` from the table in
``yieldstar_django/conf.py`` (``python scripts/settings_page.py``; ``--check`` exits 1 if
the page differs). ``tests/project/test_conf.py`` runs the check."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference" / "settings.md"
BEGIN = "<!-- begin: generated from yieldstar_django/conf.py by scripts/settings_page.py -->"
END = "<!-- end: generated -->"


def render() -> str:
    """The Markdown of every setting, in table order."""
    sys.path.insert(0, str(ROOT))
    from yieldstar_django.conf import SETTINGS

    sections = []
    for setting in SETTINGS:
        pinned = "*Pinned.* " if setting.pinned else ""
        sections.append(
            f"## `{setting.name}`\n\n{pinned}Default: {setting.shown}.\n\n{setting.doc.strip()}\n"
        )
    return "\n".join(sections)


def page(current: str) -> str:
    """``current`` with the generated part replaced."""
    head, rest = current.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n\n{render()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    current = PAGE.read_text(encoding="utf-8")
    wanted = page(current)
    if "--check" in argv:
        if wanted != current:
            print(f"{PAGE} differs from the settings table; run scripts/settings_page.py")
            return 1
        return 0
    PAGE.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
