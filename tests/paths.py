"""The repository's root, for the tests that run its scripts, read its files or write
under its ``var/``."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
