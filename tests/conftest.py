"""Shared pytest configuration.

Every test under ``tests/e2e``, ``tests/faults`` and ``tests/browser`` carries the marker
of its suite (``e2e``, ``faults``, ``browser``), which plain ``pytest`` leaves out
(``addopts`` in ``pyproject.toml``; ``scripts/test.sh`` runs them).

Tests marked ``postgres`` run only when ``DATABASE_URL`` points at PostgreSQL, tests
marked ``sqlite`` only when it points at SQLite; the others are skipped with a reason.

Under pytest-xdist (``scripts/test.sh`` runs ``-n 2 --dist loadgroup``) the tests that run
real processes (marked ``celery``, ``faults`` or ``browser``: workers, brokers, a
PostgreSQL cluster, Chromium) share one group, so they run one at a time on one worker
while the others spread over the rest; and the fault suite's figures travel from the
workers to the controller, which prints them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings

from tests.faults import figures
from tests.paths import ROOT

#: The fixtures on the real databases and in child processes (``alias``, ``wakes``,
#: ``spawn``) that the tests of several parts use, and how a transactional test ends.
pytest_plugins = ["tests.shared.fixtures", "tests.shared.reset"]

#: The suites left out of plain ``pytest``: each directory's tests carry its marker.
SUITES = ("e2e", "faults", "browser")

#: Markers of the tests that run real processes, and the xdist group that serializes them.
PROCESS_MARKERS = ("celery", "faults", "browser")
PROCESS_GROUP = "processes"


def database_vendor() -> str:
    """``"postgresql"`` or ``"sqlite"``: the vendor of the ``default`` database."""
    engine = str(settings.DATABASES["default"]["ENGINE"])
    return "sqlite" if "sqlite" in engine else "postgresql"


@pytest.hookimpl(tryfirst=True)  # before the -m selection sees the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    vendor = database_vendor()
    tests = ROOT / "tests"
    for item in items:
        parts = item.path.relative_to(tests).parts if item.path.is_relative_to(tests) else ()
        if parts and parts[0] in SUITES:
            item.add_marker(parts[0])

        for marker, needs in (("postgres", "postgresql"), ("sqlite", "sqlite")):
            if item.get_closest_marker(marker) and vendor != needs:
                item.add_marker(
                    pytest.mark.skip(reason=f"needs {needs}; DATABASE_URL points at {vendor}")
                )
        if any(item.get_closest_marker(marker) for marker in PROCESS_MARKERS):
            item.add_marker(pytest.mark.xdist_group(PROCESS_GROUP))


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's, and behind a transaction pooler (``YIELDSTAR_TEST_POOLER``) the
    pooler's server connections to the test databases ended before they are dropped: the
    pooler keeps them open after every client left, and PostgreSQL refuses to drop a
    database with connections."""
    yield
    if getattr(settings, "POOLER", None) != "transaction":
        return
    from django.db import connections

    with django_db_blocker.unblock():
        names = [
            connections[alias].settings_dict["NAME"]
            for alias in connections
            if connections[alias].vendor == "postgresql"
        ]
        connections.close_all()
        with connections["default"]._nodb_cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = ANY(%s) AND pid <> pg_backend_pid()",
                [names],
            )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker: hand the fault suite's figures to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output[figures.WORKER_KEY] = json.dumps(figures.FIGURES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """On the xdist controller: collect a finished worker's fault suite figures."""
    output = getattr(node, "workeroutput", None) or {}
    figures.FIGURES.extend(json.loads(output.get(figures.WORKER_KEY, "[]")))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the fault suite's figures, once: on the controller, or in a run without xdist
    (a worker's go to the controller)."""
    if not hasattr(terminalreporter.config, "workerinput"):
        figures.write_summary(terminalreporter)
