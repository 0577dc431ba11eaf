"""Draw the panels of docs/operations/yieldstar-dashboard.json from metrics measured on a
run of this machine: ``python scripts/render_dashboard.py [seconds]``.

Runs a workload against ``DATABASE_URL`` (PostgreSQL) with a real Celery worker in this
process (a solo pool on an in-memory broker) and the relay: executions that take an item
from a store and run a few steps, items pushed to their stores, some workflows that fail,
writers racing on one store, and a broker outage of a few seconds (wakes refused, then
delivered by the relay). The metrics are scraped every second from prometheus-client's registry, and
each panel's query is computed from the scrapes as Prometheus would (``rate`` over a
window, ``histogram_quantile`` over the buckets), then drawn with matplotlib into
docs/img/observability-dashboard.png. Grafana is not needed (nor run) for it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


#: Set during the run's broker outage: the wake backend refuses, the relay delivers later.
OUTAGE = threading.Event()


def flaky_backend(wakes: Any) -> None:
    """The Celery backend, but refusing while ``OUTAGE`` is set."""
    if OUTAGE.is_set():
        raise ConnectionError("render: the broker is down")
    from yieldstar_django.wakes import celery_backend

    celery_backend(wakes)


def _setup() -> Any:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from celery import Celery
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    settings.YIELDSTAR = {
        "RUN_SLICE_SECONDS": None,
        "CAS_MAX_ATTEMPTS": 3,
        "WAKE_BACKEND": flaky_backend,
        "RELAY_DELAY": 0.5,
    }
    from yieldstar_django.conf import yieldstar_settings

    yieldstar_settings.reload()
    app = Celery("render", broker="memory://", set_as_current=True)
    app.conf.task_default_queue = "render"
    import yieldstar_django.tasks  # noqa: F401  (the resume task, on the current app)

    return app


def _workload(app: Any, seconds: float, scrape: Any) -> None:
    from celery.contrib.testing.worker import start_worker

    from yieldstar_django import define_store, get_store_client, start_workflow, workflow

    box = define_store(f"render-box-{uuid.uuid4().hex[:4]}", None, initial=lambda i: {"q": []})
    hot = define_store(f"render-hot-{uuid.uuid4().hex[:4]}", None, initial=lambda i: {"n": 0})

    def first(state: Any) -> Any:
        return state["q"][0] if state["q"] else None

    def work(x: int) -> int:
        time.sleep(0.002 * (x % 5))
        return x

    def fail() -> None:
        raise RuntimeError("render: a failing step")

    @workflow(f"render.order.{uuid.uuid4().hex[:4]}")
    def order(step: Any, store_id: str) -> Any:
        item = yield from step.take(box, store_id, selector=first)
        total = 0
        for i in range(3):
            total += yield from step.run(work, item + i)
        return total

    @workflow(f"render.refund.{uuid.uuid4().hex[:4]}")
    def refund(step: Any) -> Any:
        yield from step.run(fail)

    client = get_store_client()
    stop = threading.Event()

    def racer() -> None:
        from django.db import connections

        from yieldstar_django import StoreContentionError

        try:
            while not stop.is_set():
                try:
                    get_store_client().update_store(
                        hot, "h", updater=lambda d: d.update(n=d["n"] + 1)
                    )
                except StoreContentionError:
                    time.sleep(0.05)
        finally:
            connections.close_all()

    def relay() -> None:
        from django.db import connections

        from yieldstar_django.wakes.relay import relay_once

        try:
            while not stop.is_set():
                relay_once()
                time.sleep(0.5)
        finally:
            connections.close_all()

    with start_worker(app, pool="solo", perform_ping_check=False, loglevel="ERROR"):
        racers = [threading.Thread(target=racer) for _ in range(3)]
        racers.append(threading.Thread(target=relay))
        for thread in racers:
            thread.start()
        waiting: list[str] = []
        end = time.monotonic() + seconds
        tick = 0
        while time.monotonic() < end:
            tick += 1
            # A broker outage from 40% to 55% of the run: wakes wait for the relay.
            elapsed = seconds - (end - time.monotonic())
            if 0.4 * seconds <= elapsed < 0.55 * seconds:
                OUTAGE.set()
            else:
                OUTAGE.clear()
            for _ in range(2 + tick % 3):
                store_id = uuid.uuid4().hex[:8]
                start_workflow(order, store_id)
                waiting.append(store_id)
            if tick % 4 == 0:
                start_workflow(refund)
            for store_id in waiting[: max(0, len(waiting) - 3)]:
                client.update_store(box, store_id, updater=lambda d, n=tick: d["q"].append(n))
            waiting = waiting[max(0, len(waiting) - 3) :]
            scrape()
            time.sleep(max(0.0, 1.0 - 0.05))
        stop.set()
        for thread in racers:
            thread.join()
        time.sleep(2)
        scrape()


def _scraper() -> tuple[list[tuple[float, Samples]], Any]:
    from prometheus_client.parser import text_string_to_metric_families

    from yieldstar_django.observability import metrics

    scrapes: list[tuple[float, Samples]] = []

    def scrape() -> None:
        body = metrics.exposition()[0].decode()
        samples: Samples = {}
        for family in text_string_to_metric_families(body):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        scrapes.append((time.time(), samples))

    return scrapes, scrape


WINDOW = 10  # scrapes (seconds) a rate spans


def _rate(scrapes: list[tuple[float, Samples]], name: str, by: tuple[str, ...]) -> dict:
    """``sum by (by) (rate(name[WINDOW s]))`` at each scrape."""
    out: dict[tuple[str, ...], list[tuple[float, float]]] = defaultdict(list)
    for i in range(WINDOW, len(scrapes)):
        (t0, s0), (t1, s1) = scrapes[i - WINDOW], scrapes[i]
        sums: dict[tuple[str, ...], float] = defaultdict(float)
        for (n, labels), v in s1.items():
            if n != name:
                continue
            key = tuple(dict(labels).get(b, "") for b in by)
            sums[key] += (v - s0.get((n, labels), 0.0)) / (t1 - t0)
        for key, v in sums.items():
            out[key].append((t1, v))
    return out


def _quantile(
    scrapes: list[tuple[float, Samples]], name: str, q: float, by: tuple[str, ...]
) -> dict:
    """``histogram_quantile(q, sum by (le, by) (rate(name_bucket[WINDOW s])))``."""
    out: dict[tuple[str, ...], list[tuple[float, float]]] = defaultdict(list)
    for i in range(WINDOW, len(scrapes)):
        (_, s0), (t1, s1) = scrapes[i - WINDOW], scrapes[i]
        buckets: dict[tuple[str, ...], dict[float, float]] = defaultdict(lambda: defaultdict(float))
        for (n, labels), v in s1.items():
            if n != name + "_bucket":
                continue
            d = dict(labels)
            key = tuple(d.get(b, "") for b in by)
            buckets[key][float(d["le"])] += v - s0.get((n, labels), 0.0)
        for key, counts in buckets.items():
            les = sorted(counts)
            total = counts[les[-1]]
            if total <= 0:
                continue
            rank, prev_le, prev_c = q * total, 0.0, 0.0
            for le in les:
                if counts[le] >= rank:
                    if le == float("inf"):
                        value = prev_le
                    else:
                        span = counts[le] - prev_c
                        value = prev_le + (le - prev_le) * ((rank - prev_c) / span if span else 0)
                    out[key].append((t1, value))
                    break
                prev_le, prev_c = le, counts[le]
    return out


def _gauge(scrapes: list[tuple[float, Samples]], name: str) -> dict:
    return {(): [(t, s[(name, ())]) for t, s in scrapes if (name, ()) in s]}


def _draw(scrapes: list[tuple[float, Samples]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dashboard = json.loads((ROOT / "docs/operations/yieldstar-dashboard.json").read_text())
    titles = [p["title"] for p in dashboard["panels"]]
    t0 = scrapes[0][0]

    def labelled(series: dict, fmt: str) -> dict:
        return {fmt.format(*key): points for key, points in series.items()}

    lat = "yieldstar_wake_latency_seconds"
    started = _rate(scrapes, "yieldstar_executions_started_total", ("workflow",))
    finished = _rate(scrapes, "yieldstar_executions_finished_total", ("workflow", "status"))
    steps = _quantile(scrapes, "yieldstar_step_duration_seconds", 0.95, ("kind",))
    retries = _rate(scrapes, "yieldstar_cas_retries_total", ("store",))
    contention = _rate(scrapes, "yieldstar_store_contention_errors_total", ("store",))
    panels = [
        labelled(started, "{}"),
        labelled(finished, "{} {}"),
        labelled(steps, "{}"),
        {f"p{int(q * 100)}": _quantile(scrapes, lat, q, ()).get((), []) for q in (0.5, 0.95, 0.99)},
        labelled(_gauge(scrapes, "yieldstar_outbox_depth"), "depth"),
        labelled(_gauge(scrapes, "yieldstar_outbox_oldest_age_seconds"), "age"),
        labelled(_rate(scrapes, "yieldstar_lease_takeovers_total", ()), "takeovers"),
        {**labelled(retries, "retries {}"), **labelled(contention, "contention {}")},
        labelled(_quantile(scrapes, "yieldstar_relay_lag_seconds", 0.95, ()), "p95"),
    ]
    units = [p["fieldConfig"]["defaults"]["unit"] for p in dashboard["panels"]]
    plt.style.use("dark_background")
    fig, axes = plt.subplots(3, 3, figsize=(16, 10), facecolor="#181b1f")
    for ax, title, series, unit in zip(axes.flat, titles, panels, units, strict=True):
        ax.set_facecolor("#111217")
        ax.set_title(title, fontsize=9, loc="left", color="#d8d9da")
        for label, points in sorted(series.items()):
            if points:
                ax.plot([t - t0 for t, _ in points], [v for _, v in points], label=label, lw=1.4)
        if not any(series.values()):
            ax.text(0.5, 0.5, "No data", ha="center", va="center", color="#8e8e8e",
                    transform=ax.transAxes)  # fmt: skip
        ax.set_ylabel({"ops": "per second", "s": "seconds", "short": ""}[unit], fontsize=8)
        ax.set_xlabel("seconds into the run", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(color="#2c3235", lw=0.5)
        if any(series.values()):
            ax.legend(fontsize=6, loc="upper left")
    fig.suptitle(
        "yieldstar_django dashboard (docs/operations/yieldstar-dashboard.json), drawn from "
        "scraped metrics by scripts/render_dashboard.py",
        fontsize=10,
        color="#d8d9da",
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80, facecolor=fig.get_facecolor())


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    app = _setup()
    scrapes, scrape = _scraper()
    _workload(app, seconds, scrape)
    _draw(scrapes, ROOT / "docs/img/observability-dashboard.png")
    print(f"{len(scrapes)} scrapes; wrote docs/img/observability-dashboard.png")


if __name__ == "__main__":
    main()
