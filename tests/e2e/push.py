"""``python -m tests.e2e.push STORE_ID VALUE...``: push items from another process."""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.e2e.worker_settings")
    import django

    django.setup()
    from tests.e2e.workflows import push

    push(argv[0], argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
