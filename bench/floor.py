"""The floor of the stack for a large write: the least any Django view must hold to store a
body, against which ``bench.bounds`` measures a ``PUT`` of the API.

:func:`store_body` reads the request's body, decodes it with ``json.loads``, encodes it again
with ``json.dumps`` (the canonical form the stores write) and writes the text to a
bench-only table through Django's connection (an upsert), answering ``204``: no checks, no
diff, no history, no response body. A ``DELETE`` deletes the row, as a round of the bench
starts with one. Routed only by the bench's URLconf (``bench.urls``).
"""

from __future__ import annotations

import json

from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

#: The bench-only table the floor writes (created by :func:`create_table`).
TABLE = "bench_floor"


def create_table() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} (id text PRIMARY KEY, state text NOT NULL)"
        )
        cursor.execute(f"TRUNCATE {TABLE}")


@csrf_exempt
def store_body(request: HttpRequest, id: str) -> HttpResponse:
    if request.method == "DELETE":
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {TABLE} WHERE id = %s", [id])
        return HttpResponse(status=204)
    if request.method != "PUT":
        return HttpResponse(status=405)
    # The stream, as the API's parser reads it: ``request.body`` refuses a body over
    # ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (2.5 MB by default) and would keep the bytes.
    raw = request.read()
    value = json.loads(raw)
    del raw
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    del value
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (id, state) VALUES (%s, %s) "
            "ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state",
            [id, text],
        )
    return HttpResponse(status=204)
