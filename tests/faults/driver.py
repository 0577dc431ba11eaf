"""``python -m tests.faults.driver COMMAND ...``: the fault suite's producer process.

- ``start WORKFLOW JSON_ARGS_LIST``: start one execution per argument list; print the ids.
- ``enqueue QUEUE WORKFLOW JSON_STARTS``: start one execution per ``{"args", "key",
  "priority"}`` through the queue ``QUEUE``; print the ids.
- ``push QUEUE_IDS PREFIX COUNT [PAUSE]``: push ``COUNT`` items ``PREFIX-0..`` one commit
  each, ``PAUSE`` seconds apart, to the comma-separated queues in turn; a failed commit
  (database down) is retried with the same item, so a push is recorded as ``ok`` once,
  or indeterminate and retried.
- ``add TALLY_ID COUNT PAUSE``: add 1 to a tally ``COUNT`` times, one commit each,
  ``PAUSE`` seconds apart (a writer that waits whenever another holds the tally's row).
- ``schedule NAME WORKFLOW EVERY CATCH_UP JSON_ARGS``: create a schedule in the database
  (``create_schedule``); ``pause NAME``: pause it.

Runs with ``tests.faults.settings``, so its store operations are recorded too.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.faults.settings")
    import django

    django.setup()
    from django.db import DatabaseError, close_old_connections

    from yieldstar_django.runtime import start_workflow

    from .workflows import add, push

    command, *rest = argv
    if command == "start":
        for args in json.loads(rest[1]):
            print(start_workflow(rest[0], *args), flush=True)
        return 0
    if command == "enqueue":
        from yieldstar_django.runtime.queues import get_queue

        queue = get_queue(rest[0])
        for start in json.loads(rest[2]):
            key, priority = start.get("key"), start.get("priority", 0)
            print(queue.start(rest[1], *start["args"], key=key, priority=priority), flush=True)
        return 0
    if command == "push":
        queue_ids, prefix, count = rest[0].split(","), rest[1], int(rest[2])
        pause = float(rest[3]) if len(rest) > 3 else 0.0
        for n in range(count):
            while True:
                try:
                    push(queue_ids[n % len(queue_ids)], [f"{prefix}-{n}"])
                    break
                except DatabaseError:
                    close_old_connections()
                    time.sleep(0.2)
            if pause:
                time.sleep(pause)
        return 0
    if command == "add":
        for _ in range(int(rest[1])):
            while True:
                try:
                    add(rest[0], 1)
                    break
                except DatabaseError:
                    close_old_connections()
                    time.sleep(0.2)
            time.sleep(float(rest[2]))
        return 0
    if command == "cancel":
        from yieldstar_django.runtime import cancel_execution

        for execution_id in rest:
            print(cancel_execution(execution_id), flush=True)
        return 0
    if command == "schedule":
        from yieldstar_django.runtime.schedules import create_schedule

        name, workflow, every, catch_up, args = rest
        create_schedule(name, workflow, every=int(every), catch_up=catch_up, args=json.loads(args))
        return 0
    if command == "pause":
        from yieldstar_django.runtime.schedules import pause_schedule

        pause_schedule(rest[0])
        return 0
    raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
