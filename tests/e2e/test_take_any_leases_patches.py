"""``take_any``, leased claims and ``step.patched`` end to end, with real workers and the
relay: a reply-or-timeout ``take_any``, a picker SIGKILLed while holding a leased claim,
and a deploy that patches a step while executions run."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.workflows import leased, push
from yieldstar_django import get_store_client
from yieldstar_django.models import ClaimLeaseRecord
from yieldstar_django.runtime import get_execution, start_workflow

from .conftest import E2E_MARKS, Env, wait_until

pytestmark = [*E2E_MARKS, pytest.mark.django_db(transaction=True)]


def test_take_any_gets_the_reply_or_times_out(e2e: Env) -> None:
    e2e.start_worker()
    e2e.start_relay()
    store_id = f"reply-{uuid.uuid4().hex[:8]}"
    answered = start_workflow("e2e.reply_or_timeout", store_id, 60.0)
    silent = start_workflow("e2e.reply_or_timeout", f"{store_id}-none", 1.0)
    wait_until("the wait", lambda: get_execution(answered).status == "waiting")
    push(store_id, ["yes"])
    wait_until(
        "both to finish", lambda: all(get_execution(e).is_finished for e in (answered, silent))
    )
    assert get_execution(answered).result == [0, "yes"]
    assert get_execution(silent).result == [None, None]
    e2e.stop_all()


def test_sigkilled_picker_hands_its_item_back_and_it_is_picked_once(
    e2e: Env, tmp_path: Path
) -> None:
    lease_seconds = 2.0
    store_id = f"lease-{uuid.uuid4().hex[:8]}"
    client = get_store_client()
    client.update_store(leased, store_id, updater=lambda d: d["items"].append("item-1"))
    e2e.start_relay()
    doomed = e2e.start_worker("doomed")
    first_marker = tmp_path / "first"
    first_marker.with_suffix(".hang").write_text("")
    first = start_workflow("e2e.lease_picker", store_id, str(first_marker), lease_seconds)
    wait_until("the first picker to hang", lambda: first_marker.exists())
    doomed.kill()
    taken_at = ClaimLeaseRecord.objects.get(execution_id=first).created_at.timestamp()

    wait_until(
        "the item back in the queue",
        lambda: client.get_store(leased, store_id).state["items"] == ["item-1"],
        lease_seconds + 5,
    )
    back_after = time.time() - taken_at
    assert back_after <= lease_seconds + 5, back_after
    e2e.start_worker("rescuer")
    second = start_workflow("e2e.lease_picker", store_id, str(tmp_path / "second"), 30.0)
    wait_until(
        "both pickers to finish",
        lambda: all(get_execution(e).is_finished for e in (first, second)),
        90,
    )
    assert get_execution(second).result == "item-1", get_execution(second).error
    assert get_execution(first).result is None  # its lease had expired: not counted
    state = client.get_store(leased, store_id).state
    assert state == {"items": [], "picked": ["item-1"]}
    e2e.stop_all()


def test_a_deploy_with_step_patched_keeps_running_executions_on_their_branch(
    e2e: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    e2e.start_relay()
    old_code = e2e.start_worker("old-code")
    old = start_workflow("e2e.versioned", 4.0)
    wait_until("the old execution to sleep", lambda: get_execution(old).status == "sleeping")
    old_code.stop()
    monkeypatch.setenv("E2E_PATCHED", "1")  # the deploy: workers start with the new code
    e2e.start_worker("new-code")
    new = start_workflow("e2e.versioned", 0.5)
    wait_until("both to finish", lambda: all(get_execution(e).is_finished for e in (old, new)), 90)
    assert get_execution(old).status == "completed", get_execution(old).error
    assert get_execution(old).result == ["a", "b"]
    assert get_execution(new).result == ["a", "c", "b"]
    e2e.stop_all()
