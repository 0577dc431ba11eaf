"""PostgreSQL indexes on store instances that a model cannot declare portably.

Hand-written (keep it when regenerating ``0001_initial``). On other databases it does
nothing: SQLite's default ``BINARY`` collation already orders ids in code-point order, so
the ``(name, store_id)`` unique constraint serves both queries there.

- ``yieldstar_store_ids_c``: ``(name, store_id COLLATE "C")``. Ids of one store name in
  code-point order (``ORDER BY store_id COLLATE "C"``, with ``store_id COLLATE "C" > %s``
  for the next page) are an index scan: the API's id pages (``store_ids_page``) and
  ``DatabaseStoreClient.list_stores``. The unique constraint's index uses the database's
  collation, whose order is not code-point order (en_US, ICU), so it cannot serve them.
- ``yieldstar_store_id_prefix``: ``store_id varchar_pattern_ops``. The admin's id search is
  ``store_id__startswith`` (``store_id::text LIKE 'abc%'``), which a btree index in a
  non-"C" collation cannot serve; a pattern-ops index can, in any collation.

``IF NOT EXISTS``: on a large table, create them first with ``CREATE INDEX CONCURRENTLY``
under these names (see the database page of the docs), and this migration does nothing.
"""

from __future__ import annotations

from django.db import migrations

from yieldstar_django.sql import postgres_only, statements

create_indexes, drop_indexes = postgres_only(
    statements("0003_postgres_store_indexes"), statements("0003_postgres_store_indexes.down")
)


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0002_postgres_functions")]

    operations = [migrations.RunPython(create_indexes, drop_indexes, elidable=False)]
