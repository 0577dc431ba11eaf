"""The demo command: ``python -m demo_project.run_demo`` (what ``scripts/demo.sh`` runs).

For now it only runs ``manage.py check`` (settings, system checks, app loading,
workflow autodiscovery). The real end-to-end demo (a Celery worker, workflows that take
from and update shared stores, wakes) replaces this body once the runtime exists.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Run the demo; return the process exit code."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", "check", *(argv or [])])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
