"""The demo: ``bash scripts/demo.sh`` runs ``python -m demo_project.run_demo``.

It migrates the database, creates an admin login, starts a real Celery worker, the wake
relay (``manage.py yieldstar_relay``) and the development server, then drives an order
pipeline (``demo_project/demo/workflows.py``) and narrates what happens:

1. two ``demo.picker`` workflows wait on an empty order queue (a ``take`` with a waiter);
2. orders are pushed into the queue; each push wakes the pickers, which claim one order
   each (never the same one) and start a ``demo.order`` workflow for it;
3. each order reserves stock, charges a flaky payment gateway (retried on durable
   timers), and large ones wait for a manager's approval, a store a person changes in the
   admin or through the HTTP API; a ``demo.reminder`` sleeps and nudges meanwhile;
4. the queue closes, the pickers finish, and a summary says where to look.

Defaults: SQLite and kombu's file-system broker under ``var/``, so nothing else needs to
run; ``DATABASE_URL`` and ``CELERY_BROKER_URL`` select PostgreSQL and Redis or RabbitMQ.
With ``--exit-when-done`` (the default when ``CI`` is set or stdout is not a terminal) it
decides the approvals itself, checks the outcome and exits (status 0 when every order
ended as expected). Otherwise it keeps everything running for you to explore until Ctrl-C,
which stops every process it started.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
ADMIN_USER = "admin"

#: (order suffix, customer, lines, the outcome the demo expects and checks)
ORDERS: list[tuple[str, str, list[dict[str, Any]], str]] = [
    ("A1001", "Ana", [{"sku": "mug", "qty": 2, "price": 8}], "shipped"),
    ("A1002", "Ben", [{"sku": "kettle", "qty": 1, "price": 45}], "shipped"),
    ("A1003", "Chloé", [{"sku": "espresso-machine", "qty": 1, "price": 649}], "shipped"),
    ("A1004", "Dev", [{"sku": "toaster", "qty": 2, "price": 39}], "shipped"),
    ("A1005", "Eli", [{"sku": "espresso-machine", "qty": 5, "price": 649}], "out of stock"),
    ("A1006", "Fay", [{"sku": "kettle", "qty": 12, "price": 45}], "rejected"),
]
#: Orders the demo approves / rejects (when nobody else decides first).
APPROVE = {"A1003"}
REJECT = {"A1006"}


class Stop(Exception):
    """Ctrl-C or SIGTERM: stop every child and exit."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise Stop(signal.Signals(signum).name)


# -- output ---------------------------------------------------------------------------------


class Narrator:
    """Prints timestamped lines relative to the start of the demo."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.start = time.monotonic()

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def event(self, text: str) -> None:
        self.say(f"  [{time.monotonic() - self.start:6.1f}s] {text}")

    def heading(self, text: str) -> None:
        self.say()
        self.say(f"==> {text}")


# -- child processes ------------------------------------------------------------------------


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path


@dataclass
class Children:
    """The processes the demo starts; ``stop()`` terminates them all (in their own
    process groups, so a Ctrl-C reaches only the demo, which then stops them in order)."""

    log_dir: Path
    items: list[Child] = field(default_factory=list)

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> Child:
        log = self.log_dir / f"{name}.log"
        handle = log.open("wb")
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        handle.close()
        child = Child(name, process, log)
        self.items.append(child)
        return child

    def check(self) -> None:
        for child in self.items:
            code = child.process.poll()
            if code is not None:
                tail = child.log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the {child.name} exited with status {code}:\n{tail}")

    def stop(self, timeout: float = 15.0) -> None:
        for child in reversed(self.items):
            if child.process.poll() is None:
                child.process.terminate()  # a Celery worker then stops its pool warmly
        deadline = time.monotonic() + timeout
        for child in reversed(self.items):
            remaining = max(deadline - time.monotonic(), 0.1)
            try:
                child.process.wait(remaining)
            except subprocess.TimeoutExpired:
                try:  # the whole group: a worker's pool processes too
                    os.killpg(child.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                child.process.wait()
        self.items.clear()


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _pick_port(wanted: int) -> int:
    if wanted:
        for port in range(wanted, wanted + 20):
            if _port_free(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(
    what: str, ready: Callable[[], bool], children: Children, timeout: float = 90.0
) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        children.check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not become ready within {timeout:.0f}s")
        time.sleep(0.2)


def _http_up(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


# -- the scenario ---------------------------------------------------------------------------


@dataclass
class Scenario:
    """Drives one run of the order pipeline, identified by ``run`` (store ids and
    execution ids carry it, so runs never collide)."""

    run: str
    narrator: Narrator
    children: Children
    seen: dict[str, tuple[str, str]] = field(default_factory=dict)

    def order_id(self, suffix: str) -> str:
        return f"{self.run}-{suffix}"

    def executions(self) -> list[Any]:
        from django.db.models import Q

        from yieldstar_django.models import Execution

        return list(
            Execution.objects.filter(
                Q(id__endswith=self.run) | Q(id__contains=f"-{self.run}-")
            ).order_by("created_at")
        )

    def watch(self) -> list[Any]:
        """Print every execution whose status changed since the last look."""
        executions = self.executions()
        for execution in executions:
            state = (execution.status, execution.waiting_on)
            if self.seen.get(execution.id) == state:
                continue
            self.seen[execution.id] = state
            self.narrator.event(f"{execution.id:<28} {_describe(execution)}")
        return executions

    def wait(self, what: str, done: Callable[[list[Any]], bool], timeout: float) -> list[Any]:
        deadline = time.monotonic() + timeout
        while True:
            executions = self.watch()
            if done(executions):
                return executions
            self.children.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.25)


def _describe(execution: Any) -> str:
    status = execution.status
    if status == "waiting":
        return f"waiting   (take at step {execution.waiting_on!r}; a waiter is registered)"
    if status == "sleeping":
        return f"sleeping  (durable timer at step {execution.waiting_on!r})"
    if status == "retrying":
        return f"retrying  (step {execution.waiting_on!r} failed; retry on a durable timer)"
    if status == "completed":
        return f"completed -> {execution.result}"
    if status == "failed":
        error = execution.error or {}
        return f"FAILED    {error.get('type')}: {error.get('message')}"
    return str(status)


def _by_id(executions: list[Any]) -> dict[str, Any]:
    return {execution.id: execution for execution in executions}


def drive(scenario: Scenario, args: argparse.Namespace, urls: dict[str, str]) -> bool:
    """Run the scenario; return whether every order ended as expected."""
    from django.db import transaction

    from demo_project.demo.stores import approvals, order_queue, shipping_log, stock
    from yieldstar_django import get_store_client, start_workflow

    say, run = scenario.narrator, scenario.run
    client = get_store_client()
    pickers = [f"picker-{n}-{run}" for n in (1, 2)]

    say.heading(f"run {run}: two pickers start and wait on the empty order queue")
    for n, execution_id in enumerate(pickers, start=1):
        start_workflow("demo.picker", run, f"picker-{n}", execution_id=execution_id)
    scenario.wait(
        "the pickers to wait on the queue",
        lambda ex: sum(1 for e in ex if e.id in pickers and e.status == "waiting") == 2,
        args.step_timeout,
    )

    say.heading("the shop pushes six orders, in two batches (each push wakes the pickers)")
    for batch in (ORDERS[:3], ORDERS[3:]):
        new_orders = [
            {
                "id": scenario.order_id(suffix),
                "customer": customer,
                "lines": lines,
                "total": sum(line["qty"] * line["price"] for line in lines),
                "status": "new",
                "picked_by": None,
            }
            for suffix, customer, lines, _ in batch
        ]

        def push(queue: Any, new_orders: list[dict[str, Any]] = new_orders) -> None:
            queue["orders"].extend(new_orders)

        with transaction.atomic():
            client.update_store(order_queue, run, updater=push)
        say.event("pushed " + ", ".join(scenario.order_id(o[0]) for o in batch))
        scenario.wait("the batch to be picked", _all_picked(scenario, batch), 60)

    big = [scenario.order_id(o) for o in sorted(APPROVE | REJECT)]
    scenario.wait(
        "the large orders to wait for approval",
        lambda ex: all(
            _by_id(ex).get(f"order-{o}") is not None
            and _by_id(ex)[f"order-{o}"].status == "waiting"
            for o in big
        ),
        args.step_timeout,
    )
    say.heading("two large orders wait for a manager's approval")
    for order_id in big:
        say.say(f"    approval/{order_id}:")
        say.say(f"      admin: {urls['admin']}yieldstar/storeinstance/?q={order_id}")
        say.say(
            f"      API:   curl -u {ADMIN_USER}:{args.password} -X PATCH "
            "-H 'Content-Type: application/merge-patch+json' "
            f"""-d '{{"status": "approved", "decided_by": "you"}}' """
            f"{urls['api']}stores/demo.approval/{order_id}/"
        )
    if args.exit_when_done:
        say.say(f"    (deciding them in {args.approve_after:.0f}s: the reminders sleep 5s first)")
    else:
        say.say(
            f"    Decide them yourself within {args.approve_after:.0f}s (admin or API); "
            "whatever is still pending then is decided by the demo."
        )
    deadline = time.monotonic() + args.approve_after
    while time.monotonic() < deadline:
        scenario.watch()
        scenario.children.check()
        if all(client.get_store(approvals, o).state["status"] != "pending" for o in big):
            break
        time.sleep(0.25)
    for suffix in sorted(APPROVE | REJECT):
        order_id = scenario.order_id(suffix)
        decision = "approved" if suffix in APPROVE else "rejected"

        def decide(approval: dict[str, Any], decision: str = decision) -> None:
            if approval["status"] == "pending":
                approval.update(status=decision, decided_by="the demo", note="decided by run_demo")

        result = client.update_store(approvals, order_id, updater=decide)
        say.event(f"approval/{order_id}: {result.state['status']} by {result.state['decided_by']}")

    say.heading("the shop closes the queue; the pickers finish")
    client.update_store(order_queue, run, updater=lambda queue: queue.update(closed=True))
    executions = scenario.wait(
        "every execution to finish",
        lambda ex: (
            len(ex) >= 2 + len(ORDERS) + len(APPROVE | REJECT) and all(e.is_finished for e in ex)
        ),
        args.step_timeout,
    )

    return _summary(scenario, executions, client, urls, args, stock, shipping_log)


def _all_picked(
    scenario: Scenario, batch: list[tuple[str, str, list[dict[str, Any]], str]]
) -> Callable[[list[Any]], bool]:
    """Whether an order workflow was started for every order of ``batch``."""
    ids = {f"order-{scenario.order_id(o[0])}" for o in batch}
    return lambda executions: ids <= {e.id for e in executions}


def _summary(
    scenario: Scenario,
    executions: list[Any],
    client: Any,
    urls: dict[str, str],
    args: argparse.Namespace,
    stock: Any,
    shipping_log: Any,
) -> bool:
    from demo_project.demo.stores import approvals
    from yieldstar_django.models import ExecutionStep

    say, run = scenario.narrator, scenario.run
    by_id = _by_id(executions)
    say.heading("what happened")
    ok = True
    picked: list[str] = []
    for n in (1, 2):
        picker = by_id[f"picker-{n}-{run}"]
        result = picker.result or {}
        picked += result.get("picked", [])
        say.say(f"    picker-{n} picked {', '.join(result.get('picked', [])) or 'nothing'}")
    every = sorted(scenario.order_id(o[0]) for o in ORDERS)
    exactly_once = sorted(picked) == every
    ok &= exactly_once
    say.say(f"    every order picked exactly once: {'yes' if exactly_once else 'NO'}")
    for suffix, customer, _, expected in ORDERS:
        order_id = scenario.order_id(suffix)
        if suffix in APPROVE | REJECT:  # whoever decided, the outcome follows the decision
            decided = client.get_store(approvals, order_id).state["status"]
            expected = "shipped" if decided == "approved" else "rejected"
        execution = by_id.get(f"order-{order_id}")
        outcome = (execution.result or {}).get("outcome") if execution else None
        steps = ExecutionStep.objects.filter(execution_id=f"order-{order_id}")
        retries = sum(max(s.attempts - 1, 0) for s in steps)
        mark = "ok" if outcome == expected else f"EXPECTED {expected}"
        ok &= outcome == expected
        extra = f", {retries} gateway retr{'y' if retries == 1 else 'ies'}" if retries else ""
        say.say(f"    {order_id:<12} {customer:<6} {outcome!s:<13} [{mark}]{extra}")
    for suffix in sorted(APPROVE | REJECT):
        reminder = by_id.get(f"reminder-{scenario.order_id(suffix)}")
        if reminder is not None:
            say.say(f"    reminder for {scenario.order_id(suffix)}: {reminder.result}")
    levels = client.get_store(stock, run).state
    log = client.get_store(shipping_log, run).state
    say.say(f"    stock left: {levels}")
    say.say(f"    shipping log: {log['shipped']}")
    failed = [e.id for e in executions if e.status != "completed"]
    if failed:
        ok = False
        say.say(f"    not completed: {failed}")

    say.heading("where to look")
    say.say(f"    admin:      {urls['admin']}  (user {ADMIN_USER!r}, password {args.password!r})")
    say.say(f"    executions: {urls['admin']}yieldstar/execution/  (each with its heap of steps)")
    say.say(f"    stores:     {urls['admin']}yieldstar/storeinstance/  (versions, waiters)")
    say.say(f"    API:        {urls['api']}stores/  and  {urls['api']}schema/")
    say.say(f"    logs:       {scenario.children.log_dir}/{{worker,relay,web}}.log")
    return ok


# -- setup and main -------------------------------------------------------------------------


def _prepare(args: argparse.Namespace, say: Narrator) -> None:
    import django
    from django.core.management import call_command

    django.setup()
    from django.conf import settings

    database = settings.DATABASES["default"]
    say.heading(f"database: {database['ENGINE'].rsplit('.', 1)[-1]} {database['NAME']}")
    say.say(f"    broker:   {settings.CELERY_BROKER_URL}")
    call_command("migrate", interactive=False, verbosity=0)
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(
        username=ADMIN_USER, defaults={"is_staff": True, "is_superuser": True}
    )
    user.is_staff = user.is_superuser = True
    user.set_password(args.password)
    user.save()
    say.say(f"    admin login: {ADMIN_USER} / {args.password}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m demo_project.run_demo", description=__doc__)
    noninteractive = bool(os.environ.get("CI")) or not sys.stdout.isatty()
    parser.add_argument(
        "--exit-when-done",
        action=argparse.BooleanOptionalAction,
        default=noninteractive,
        help="decide approvals, check the outcome and exit (default when CI is set or "
        "stdout is not a terminal)",
    )
    parser.add_argument("--port", type=int, default=8000, help="runserver port (0: any free)")
    parser.add_argument(
        "--approve-after",
        type=float,
        default=None,
        help="seconds to wait for a person to decide the approvals (default 60, or 8 with "
        "--exit-when-done)",
    )
    parser.add_argument("--step-timeout", type=float, default=120.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.approve_after is None:
        args.approve_after = 8.0 if args.exit_when_done else 60.0
    args.password = os.environ.get("DEMO_ADMIN_PASSWORD") or secrets.token_urlsafe(9)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the demo; return the process exit code."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_project.settings")
    args = parse_args(argv)
    say = Narrator(sys.stdout)
    say.say("yieldstar_django demo: an order pipeline of durable workflows on shared stores")
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    log_dir = ROOT / "var" / "demo-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    children = Children(log_dir)
    finished = False
    try:
        _prepare(args, say)
        port = _pick_port(args.port)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        python = sys.executable
        say.heading("starting a Celery worker, the wake relay and the development server")
        worker = children.start(
            "worker",
            [
                python,
                "-m",
                "celery",
                "-A",
                "demo_project",
                "worker",
                "--loglevel=INFO",
                "--concurrency=2",
                "--without-mingle",
                "--without-gossip",
                "-n",
                "demo@%h",
            ],
            env,
        )
        children.start("relay", [python, "manage.py", "yieldstar_relay", "--interval", "0.5"], env)
        children.start(
            "web", [python, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"], env
        )
        _wait_for(
            "the Celery worker",
            lambda: " ready." in worker.log.read_text(errors="replace"),
            children,
        )
        _wait_for("the development server", lambda: _http_up(port), children)
        urls = {
            "admin": f"http://127.0.0.1:{port}/admin/",
            "api": f"http://127.0.0.1:{port}/yieldstar/",
        }
        say.say(f"    worker, relay and web server are up; logs in {log_dir}")
        run = f"r{time.strftime('%H%M%S')}{secrets.token_hex(1)}"
        ok = drive(Scenario(run, say, children), args, urls)
        finished = True
        say.heading("done: every order ended as expected" if ok else "done, with SURPRISES above")
        if args.exit_when_done:
            return 0 if ok else 1
        say.say("    Everything keeps running so you can look around. Ctrl-C stops it all.")
        while True:
            children.check()
            time.sleep(1)
    except Stop as stop:
        say.heading(f"{stop}: stopping the worker, the relay and the web server")
        return 0 if finished else 130
    except RuntimeError as exc:
        say.heading(f"the demo failed: {exc}")
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        children.stop()
        say.say("    stopped.")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
