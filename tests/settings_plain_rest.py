"""The test settings with ``REST_FRAMEWORK`` as a project following the README has it: no
``DEFAULT_SCHEMA_CLASS`` (used by ``tests/api/test_schema_settings.py`` in a subprocess)."""

from .settings import *  # noqa: F403
from .settings import REST_FRAMEWORK

REST_FRAMEWORK = {k: v for k, v in REST_FRAMEWORK.items() if k != "DEFAULT_SCHEMA_CLASS"}
