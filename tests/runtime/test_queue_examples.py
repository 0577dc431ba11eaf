"""The examples of docs/concepts/queues.md (the page includes this file and
``queue_examples.py``): run by the suite, so the page's claims hold."""

from yieldstar_django import cancel_execution, get_execution

from .queue_examples import emails, export_orders, exports, reindex, search_index, send_email


def test_at_most_five_emails_at_once(db, yieldstar):
    ids = [emails.start(send_email, f"user{i}@example.com", "Hello") for i in range(7)]
    statuses = [get_execution(i).status for i in ids]
    assert statuses == ["pending"] * 5 + ["queued"] * 2
    assert emails.stats().waiting == 2

    yieldstar.run_until_idle()  # each finish admits the next one
    assert all(get_execution(i).status == "completed" for i in ids)


def test_one_export_per_customer(db, yieldstar):
    first = exports.start(export_orders, "acme", key="acme")
    second = exports.start(export_orders, "acme", key="acme")
    other = exports.start(export_orders, "globex", key="globex")
    assert get_execution(second).status == "queued"  # acme has one running
    assert get_execution(other).status == "pending"

    yieldstar.run_until_idle()
    assert get_execution(first).result == get_execution(second).result == "ACME"


def test_urgent_work_goes_first(db, yieldstar):
    emails.pause()  # nothing is admitted while paused
    routine = emails.start(send_email, "all@example.com", "Newsletter")
    urgent = emails.start(send_email, "ops@example.com", "Disk full", priority=10)
    assert get_execution(routine).status == get_execution(urgent).status == "queued"
    emails.resume()
    yieldstar.run_until_idle()


def test_a_burst_of_edits_reindexes_once(db, yieldstar):
    ids = {
        search_index.start(reindex, "doc-1", revision, key="doc-1", debounce=30)
        for revision in range(1, 11)
    }
    assert len(ids) == 1  # one execution, holding the last arguments
    [execution_id] = ids

    yieldstar.advance_time(31)  # the window passed without a new start
    yieldstar.run_until_idle()
    assert get_execution(execution_id).result == 10


def test_dedupe_returns_the_live_execution(db, yieldstar):
    first = exports.start(export_orders, "initech", key="initech", dedupe=True)
    again = exports.start(export_orders, "initech", key="initech", dedupe=True)
    assert again == first

    assert cancel_execution(first)  # a cancel frees its slot too
    assert exports.start(export_orders, "initech", key="initech", dedupe=True) != first
