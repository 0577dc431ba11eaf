"""Bounds: a change's cost follows its size, not its depth; the largest write is cheap.

The same N leaves changed at depth D and at depth 2, through ``MemoryStoreClient.update_store``
(replacement: the diff; in place: the draft's writes) plus the index keys of the wake lookup
(``path_match``) and the version row's paths (``paths_json``), which the database clients
compute in the commit; then the worst body the default limits admit (``MAX_STATE_NODES``
values as chains 250 lists deep, changed at the bottom of each, padded with a string to
``MAX_STATE_BYTES``), in process: time and tracemalloc's peak against the body's size and
against decoding it alone.

Then through HTTP on PostgreSQL (``BENCH_DATABASE_URL``): ``runserver`` in a cold process
per round, a fresh connection per request, the worst bodies (the chains; as many empty
lists, replaced by empty dicts; a few megabytes of ordinary records) each replacing one of
its shape: the server's peak resident memory over both PUTs (``VmHWM``) above what it
held before the first (``VmRSS``; median of three rounds) against the same two bodies sent
to the floor of the stack (``bench.floor``: a view that only decodes, encodes and writes
them) in the same rounds; in the note, both against the body's size and the time of the
second ``PUT`` against decoding the body alone. Last, the 7.9 MB of nested empty lists the
byte limit alone admitted: refused before it is decoded.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.durable import DEFAULT_MAX_NODES, count_json_values, decode_durable
from yieldstar_django.core.memory import MemoryStoreClient
from yieldstar_django.core.waiter_index import path_match

from .table import Row

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _shape(depth: int, n: int, leaf: int) -> Any:
    value: Any = [leaf] * n
    for _ in range(depth - 2):
        value = [value]
    return {"v": value}


def _leaves(draft: Any, depth: int) -> Any:
    node = draft["v"]
    for _ in range(depth - 2):
        node = node[0]
    return node


def _commit(state: Any, updater: Callable[[Any], Any]) -> tuple[float, int]:
    """Seconds (untraced) and peak bytes (a second run, under tracemalloc, which slows
    allocation several times over) of one update from ``state`` and its wake lookup's
    keys."""
    # Imported here: the connector's package needs Django set up (``run`` does it).
    from yieldstar_django.connector.arguments import paths_json

    definition = StoreDefinition("bench-bounds", None, lambda id: state)
    measured = []
    for traced in (False, True):
        client = MemoryStoreClient()
        client.get_store(definition, "s")
        if traced:
            tracemalloc.start()
        started = time.perf_counter()
        try:
            client.update_store(definition, "s", updater=updater)
            changed = client.versions[-1].changed_paths
            path_match(changed)
            paths_json(changed)
            measured.append(
                tracemalloc.get_traced_memory()[1] if traced else time.perf_counter() - started
            )
        finally:
            if traced:
                tracemalloc.stop()
    return measured[0], int(measured[1])


def _replace(depth: int, n: int) -> tuple[float, int]:
    return _commit(_shape(depth, n, 0), lambda draft: _shape(depth, n, 1))


def _in_place(depth: int, n: int) -> tuple[float, int]:
    def updater(draft: Any) -> None:
        leaves = _leaves(draft, depth)
        for index in range(n):
            leaves[index] = 1

    return _commit(_shape(depth, n, 0), updater)


def _worst_body() -> tuple[float, int, int, float, int]:
    """The second of two replacements by the largest chains bodies: seconds, peak bytes,
    body bytes, seconds and peak bytes to decode the body alone."""
    first, second = _largest_bodies(DEFAULT_MAX_NODES)["chains"]
    state = decode_durable(first)
    t, peak = _commit(state, lambda draft: decode_durable(second))
    started = time.perf_counter()
    decode_durable(second)
    return t, peak, len(second), time.perf_counter() - started, _decoded_peak(second)


def _decoded_peak(text: str) -> int:
    """Peak bytes of decoding ``text`` alone: what any handling of the body starts with."""
    tracemalloc.start()
    try:
        decode_durable(text)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run(quick: bool = False) -> list[Row]:
    from .connector import setup_django

    setup_django()  # the connector's package (``paths_json``) needs Django
    n, deep = (2_000, 200) if quick else (10_000, 250)
    rows = []
    for name, measure in (("replaced (diff)", _replace), ("in place (draft)", _in_place)):
        t_flat, m_flat = measure(2, n)
        t_deep, m_deep = measure(deep, n)
        rows.append(
            Row(
                "bounds",
                f"{n:,} leaves at depth {deep}, {name}",
                t_deep * 1e3,
                "same at depth 2",
                t_flat * 1e3,
                "ms",
                note=f"peak {m_deep / 1e6:.1f} MB vs {m_flat / 1e6:.1f} MB "
                f"({m_deep / m_flat:.2f}x); time {t_deep / t_flat:.2f}x",
            )
        )
    t, peak, size, t_decode, decoded = _worst_body()
    rows.append(
        Row(
            "bounds",
            f"{size / 1e6:.1f} MB: {DEFAULT_MAX_NODES:,} values in 250-deep chains, "
            "all changed, in process",
            t * 1e3,
            "decoding the body alone",
            t_decode * 1e3,
            "ms",
            note=f"peak {peak / 1e6:.0f} MB = {peak / size:.1f}x the body, "
            f"{peak / decoded:.1f}x decoding it alone",
        )
    )
    return rows + http_rows(quick)


# --- through HTTP -------------------------------------------------------------------------

#: Bodies the HTTP rows send, each as (first, second): the second replaces the first.
HttpBodies = tuple[str, str]


def _largest_bodies(nodes: int) -> dict[str, HttpBodies]:
    """The worst bodies the default limits admit: ``nodes`` values (``MAX_STATE_NODES``)
    as chains 250 lists deep (every chain changed at its bottom), as a flat list of empty
    lists (replaced by empty dicts), each padded with one string to ``MAX_STATE_BYTES``;
    and a few megabytes of ordinary records, every record changed."""
    pad_to = 8 * 1024 * 1024 - 64

    def padded(items: list[str]) -> str:
        body = "[" + ",".join(items) + "]"
        pad = max(0, pad_to - len(body) - 4)
        return '["' + "x" * pad + '",' + body[1:]

    chains = (nodes - 2) // 250
    flat = nodes - 3
    records = 2_000
    return {
        "chains": (
            padded([_chain(250)] * chains),
            padded([_chain(249)] * (chains + chains // 249)),
        ),
        "flat": (padded(["[]"] * flat), padded(["{}"] * flat)),
        "records": (_records(0, nodes // 9 - records), _records(1, nodes // 9 - records)),
    }


def _chain(depth: int) -> str:
    return "[" * depth + "]" * depth


def _records(version: int, count: int) -> str:
    """``count`` records of 9 values each, about 85 bytes each (one value per ~10 bytes)."""
    return json.dumps(
        [
            {
                "id": i,
                "name": f"customer {i}",
                "email": f"c{i}@example.com",
                "active": True,
                "score": i / 7 + version,
                "tags": ["a", "b"],
            }
            for i in range(count)
        ],
        separators=(",", ":"),
    )


#: One request at a time, in the process that started (``runserver`` forks no reloader).
SERVER_FLAGS = ("--noreload", "--nothreading")


class _Server:
    """``manage.py runserver`` (single-threaded, no reloader) on the bench database: a
    cold process per round, its peak resident memory read from ``/proc``."""

    def __init__(self, port: int) -> None:
        self.port = port
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.worker_settings"}
        os.makedirs(os.path.join(ROOT, "var"), exist_ok=True)
        self.log = open(os.path.join(ROOT, "var", "bench-bounds-server.log"), "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "django", "runserver", f"127.0.0.1:{port}", *SERVER_FLAGS],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.request("GET", "/yieldstar/", None)
                return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError("the bench's HTTP server did not start") from None
                time.sleep(0.2)

    def request(self, method: str, path: str, body: str | None) -> tuple[int, bytes, float]:
        """One request on a fresh connection: status, body, seconds to the last byte."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        # A Content-Type even without a body: wsgiref (``runserver``) gives a request without
        # one ``text/plain``, which a write (a ``DELETE`` too) refuses with ``415``.
        headers = {
            "Authorization": "Basic " + base64.b64encode(b"bench:bench").decode(),
            "Content-Type": "application/json",
        }
        started = time.perf_counter()
        try:
            connection.request(method, path, body.encode() if body is not None else None, headers)
            response = connection.getresponse()
            content = response.read()
        finally:
            connection.close()
        return response.status, content, time.perf_counter() - started

    def memory(self, field: str) -> int:
        """``VmRSS`` or ``VmHWM`` (the peak) of the server, in bytes."""
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError(f"no {field} in /proc/{self.process.pid}/status")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def _setup_http() -> None:
    from .connector import setup_django

    setup_django()
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from .floor import create_table

    call_command("migrate", verbosity=0)
    User.objects.filter(username="bench").delete()
    User.objects.create_superuser("bench", password="bench")
    create_table()


#: Where a round sends its bodies: the API's store, or the floor (``bench.floor``).
API_PATH = "/yieldstar/stores/bench.anything/{id}/"
FLOOR_PATH = "/bench/floor/{id}/"


def _put_round(
    bodies: HttpBodies, path: str, port: int, statuses: tuple[int, int]
) -> tuple[float, int, int]:
    """A cold server: ``DELETE path``, the first body, then the second replacing it, timed:
    (seconds of the second, the server's peak resident memory over its size before the
    first body, the second's status). ``statuses``: what the first answers, then the
    ``DELETE``."""
    server = _Server(port)
    try:
        status, content, _ = server.request("DELETE", path, None)
        assert status == statuses[1], content[:300]
        before = server.memory("VmRSS")
        status, content, _ = server.request("PUT", path, bodies[0])
        assert status == statuses[0], content[:300]
        status, content, seconds = server.request("PUT", path, bodies[1])
        return seconds, server.memory("VmHWM") - before, status
    finally:
        server.stop()


def _decode_seconds(text: str) -> float:
    started = time.perf_counter()
    decode_durable(text)
    return time.perf_counter() - started


def http_rows(quick: bool = False) -> list[Row]:
    """Each worst body through HTTP on PostgreSQL: the server's peak memory, the median of
    three cold rounds (one for ``--quick``), against the floor's in the same rounds."""
    from yieldstar_django.conf import yieldstar_settings

    _setup_http()
    nodes = yieldstar_settings.MAX_STATE_NODES
    rounds = 1 if quick else 3
    rows = []
    for name, bodies in _largest_bodies(nodes).items():
        ours, floor = [], []
        for i in range(rounds):  # interleaved: a load on the machine falls on both alike
            ours.append(
                _put_round(bodies, API_PATH.format(id=f"http-{name}"), 8765 + i, (200, 204))
            )
            floor.append(_put_round(bodies, FLOOR_PATH.format(id=name), 8765 + i, (204, 204)))
        peak, floor_peak = (statistics.median(m[1] for m in runs) for runs in (ours, floor))
        seconds, floor_seconds = (statistics.median(m[0] for m in runs) for runs in (ours, floor))
        size = len(bodies[1].encode())
        decoding = statistics.median(_decode_seconds(bodies[1]) for _ in range(rounds))
        rows.append(
            Row(
                "bounds",
                f"PUT over HTTP, {size / 1e6:.1f} MB body: {name} "
                f"({count_json_values(bodies[1]):,} values), server peak",
                peak / 1e6,
                "the floor: a view that decodes, encodes and writes it",
                floor_peak / 1e6,
                "MB",
                note=f"HTTP {[m[2] for m in ours]}; {peak / size:.1f}x the body, the floor "
                f"{floor_peak / size:.1f}x; the second PUT {seconds:.2f} s "
                f"({min(m[0] for m in ours):.2f}-{max(m[0] for m in ours):.2f}), the floor "
                f"{floor_seconds:.2f} s, decoding alone {decoding:.2f} s",
            )
        )
    # The body the byte cap alone admitted before the value cap: refused before decoding.
    server = _Server(8765)
    try:
        body = "[" + ",".join([_chain(250)] * 15_800) + "]"
        path = "/yieldstar/stores/bench.anything/refused/"
        status, content, seconds = server.request("PUT", path, body)
        rows.append(
            Row(
                "bounds",
                f"PUT over HTTP, {len(body) / 1e6:.1f} MB of empty lists "
                f"({count_json_values(body):,} values)",
                seconds * 1e3,
                "decoding the body alone",
                _decode_seconds(body) * 1e3,
                "ms",
                note=f"HTTP {status} {json.loads(content)['code']}",
            )
        )
    finally:
        server.stop()
    return rows
