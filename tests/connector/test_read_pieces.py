"""A stored state read back on PostgreSQL in pieces of ``READ_PIECE_BYTES``: one statement,
rows no longer than a piece, joined to exactly the stored text, whatever characters a
piece's boundary cuts through."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from tests.shared.fixtures import POSTGRES
from yieldstar_django.connector import DatabaseStoreClient, client as client_module
from yieldstar_django.connector.cursors import fetchall
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.models import StoreInstance
from yieldstar_django.sql import queries

_names = itertools.count()

#: Characters of one to four bytes in UTF-8, so that pieces of a few bytes cut through
#: every kind.
TEXT = "a\u00e9\u20ac\U0001f600" * 5 + "z"


def _store(alias: str, value: Any) -> tuple[StoreDefinition, DatabaseStoreClient]:
    d = StoreDefinition(f"pieces{next(_names)}", None, lambda id: value)
    client = DatabaseStoreClient(alias)
    client.get_store(d, "s")
    return d, client


def _stored_text(alias: str, d: StoreDefinition) -> str:
    return str(StoreInstance.objects.using(alias).get(name=d.name, store_id="s").state)


def test_a_state_reads_back_exactly(alias: str) -> None:
    """Every database: the row as stored; a short state in one statement."""
    d, client = _store(alias, {"t": TEXT})
    with CaptureQueriesContext(connections[alias]) as logged:
        stored = client.read_store(d, "s")
    assert stored is not None and stored.encoded == _stored_text(alias, d)
    assert len(logged) == 1 and "generate_series" not in logged[0]["sql"]
    assert client.read_store(StoreDefinition("pieces-none", None, lambda id: {}), "s") is None


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
@pytest.mark.parametrize("piece", range(1, 9))
def test_pieces_join_to_the_stored_text(
    alias: str, piece: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pieces of 1 to 8 bytes cut the characters of 2, 3 and 4 bytes at every offset; the
    pieces and their row come from one statement (one snapshot), after the read that finds
    the state long, with the queries logged and without."""
    d, client = _store(alias, {"t": TEXT, "u": [TEXT, 1, None]})
    expected = _stored_text(alias, d)
    monkeypatch.setattr(client_module, "READ_PIECE_BYTES", piece)
    stored = client.read_store(d, "s")
    assert stored is not None and stored.encoded == expected
    with CaptureQueriesContext(connections[alias]) as logged:
        again = client.read_store(d, "s")
    assert again == stored
    assert [q["sql"].count("generate_series") for q in logged.captured_queries] == [0, 1]
    assert client.get_store(d, "s").state == {"t": TEXT, "u": [TEXT, 1, None]}


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
def test_a_long_state_arrives_a_piece_a_row(alias: str) -> None:
    """libpq never receives a whole long state in one message: the statement answers a
    row per piece of at most ``READ_PIECE_BYTES``, and one row for a short state."""
    d, client = _store(alias, {"t": "x" * (3 * client_module.READ_PIECE_BYTES)})
    piece = client_module.READ_PIECE_BYTES
    rows = _piece_rows(alias, d.name)
    assert len(rows) == 4
    assert sorted(row[2] for row in rows) == [0, 1, 2, 3]
    assert max(len(row[3]) for row in rows) == piece
    stored = client.read_store(d, "s")
    assert stored is not None and stored.encoded == _stored_text(alias, d)

    short, _ = _store(alias, {"t": TEXT})
    assert len(_piece_rows(alias, short.name)) == 1


def _piece_rows(alias: str, name: str) -> list[tuple[Any, ...]]:
    """The rows of ``read_store_pieces`` for store ``name``/``s``."""
    connection = connections[alias]
    piece = client_module.READ_PIECE_BYTES
    return fetchall(
        connection,
        queries.of(connection).read_store_pieces,
        [piece, piece, piece, name, "s"],
        binary=True,
    )
