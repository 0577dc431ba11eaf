-- Every SQL statement yieldstar_django runs, by name (loaded by sql/queries.py).
--
-- An entry is a header line "-- name --", or "-- name(point, ...) --" for a statement
-- completed by its caller (see below), a one-line comment saying what it does, and the
-- text, up to the next header. Placeholders filled once per database vendor:
--   {<model name>}   the table of that model of the app ({wakeintent}: WakeIntent's table)
--   {<entry name>}   the text of another entry: a condition or a list several statements share
--   {for_update}, {for_no_key_update}, {for_share}, {skip_locked}, {collate_c}
--                    a row lock or collation clause on PostgreSQL, nothing on SQLite (its
--                    BEGIN IMMEDIATE transactions hold the database write lock; its default
--                    BINARY collation is code-point order)
-- A header's points stay as {point} for the caller's str.format(point=...): an IN list of
-- one %s per value, a SET list built from the models, an identifier. Parameters are %s.


-- ---------------------------------------------------------------------------------------
-- The store client: reads
-- ---------------------------------------------------------------------------------------

-- read_store --
-- A store's instance id, version and state by name and id.
SELECT instance_id, version, state FROM {storeinstance} WHERE name = %s AND store_id = %s

-- read_store_short --
-- read_store on PostgreSQL: the state only when it is at most %s bytes (NULL for a longer one, which read_store_pieces reads).
SELECT instance_id, version, CASE WHEN octet_length(state) <= %s THEN state END FROM {storeinstance} WHERE name = %s AND store_id = %s

-- read_store_pieces --
-- read_store on PostgreSQL, the state as UTF-8 in pieces of %s bytes: a row per piece with its index, in no set order (one statement: one snapshot; the state decompressed once).
SELECT s.instance_id, s.version, p.i, substring(t.utf8 FROM p.i * %s + 1 FOR %s) FROM {storeinstance} s CROSS JOIN LATERAL (SELECT convert_to(s.state, 'UTF8') AS utf8 OFFSET 0) t CROSS JOIN LATERAL generate_series(0, (octet_length(t.utf8) - 1) / %s) AS p(i) WHERE s.name = %s AND s.store_id = %s

-- read_store_row --
-- A store row with its pk, unlocked.
SELECT id, instance_id, version, state FROM {storeinstance} WHERE name = %s AND store_id = %s

-- read_store_row_for_commit --
-- A store row with its pk, locked against other commits (not against a waiter's share lock).
SELECT id, instance_id, version, state FROM {storeinstance} WHERE name = %s AND store_id = %s{for_no_key_update}

-- read_store_row_for_delete --
-- A store row with its pk, locked exclusively: the store is about to be deleted.
SELECT id, instance_id, version, state FROM {storeinstance} WHERE name = %s AND store_id = %s{for_update}

-- peek_store_version --
-- A store row's pk and (instance_id, version), unlocked: the comparison before a lock.
SELECT id, instance_id, version FROM {storeinstance} WHERE name = %s AND store_id = %s

-- ledger_lookup --
-- A step's recorded result and the kind of operation that recorded it (NULL: unknown).
SELECT result, operation FROM {appliedstep} WHERE store_name = %s AND store_id = %s AND execution_id = %s AND step_key = %s

-- read_store_and_step --
-- The ledger lookup and the store read at once: exactly one row (NULLs where missing).
SELECT l.result, s.instance_id, s.version, s.state FROM (SELECT 1 AS one) k LEFT JOIN {appliedstep} l ON l.store_name = %s AND l.store_id = %s AND l.execution_id = %s AND l.step_key = %s LEFT JOIN {storeinstance} s ON s.name = %s AND s.store_id = %s

-- list_store_ids --
-- The ids of one store name in code-point order.
SELECT store_id FROM {storeinstance} WHERE name = %s ORDER BY store_id{collate_c}


-- ---------------------------------------------------------------------------------------
-- The store client: the commit as statements (SQLite; PostgreSQL with use_functions=False)
-- ---------------------------------------------------------------------------------------

-- insert_store --
-- Create a store row; its pk, or no row if the store exists.
INSERT INTO {storeinstance} (name, store_id, instance_id, version, state, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (name, store_id) DO NOTHING RETURNING id

-- update_store --
-- Write a store row's new version and state (by pk).
UPDATE {storeinstance} SET version = %s, state = %s, updated_at = %s WHERE id = %s

-- delete_store --
-- Delete a store row (by pk).
DELETE FROM {storeinstance} WHERE id = %s

-- insert_version --
-- Write a commit's history row.
INSERT INTO {storeversion} (store_name, store_id, instance_id, version, changed_paths, step_execution_id, step_key, state, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)

-- prune_version --
-- Delete the history row that fell out of VERSION_HISTORY_LIMIT.
DELETE FROM {storeversion} WHERE instance_id = %s AND version = %s

-- record_step --
-- Write a step's ledger row; no row returned when the step is recorded already.
INSERT INTO {appliedstep} (store_name, store_id, execution_id, step_key, result, operation, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (store_name, store_id, execution_id, step_key) DO NOTHING RETURNING id


-- ---------------------------------------------------------------------------------------
-- The store client: the commit and a registration as one call (PostgreSQL, sql/*_vN.sql)
-- ---------------------------------------------------------------------------------------

-- commit_call --
-- The store commit in one call: every mutation, and deletions (p_operation 'delete').
SELECT * FROM yieldstar_commit_mutation_v4(%s::text, %s::text, %s::text, %s::bigint, %s::boolean, %s::text, %s::text, %s::text, %s::boolean, %s::text[], %s::text[], %s::text, %s::text, %s::text, %s::text, %s::boolean, %s::bigint, %s::double precision, %s::text[])

-- register_waiter_call --
-- A waiter's registration in one call, fenced by a run's lease when the owner token and finished statuses are given; then its cohort, and whether a stale observation registers nothing (unless_stale).
SELECT * FROM yieldstar_register_waiter_v3(%s::text, %s::text, %s::text, %s::text, %s::text, %s::text, %s::bigint, %s::text, %s::smallint[], %s::text[], %s::smallint[], %s::text[], %s::timestamptz, %s::double precision, %s::timestamptz, %s::text, %s::text[], %s::text, %s::boolean)


-- ---------------------------------------------------------------------------------------
-- The store client: waiters
-- ---------------------------------------------------------------------------------------

-- lease_held --
-- A fenced registration's check: the execution (%s) is leased to the registering run (%s); its row share-locked.
SELECT 1 FROM {execution} WHERE id = %s AND lease_owner = %s{for_share}

-- lease_held_unfinished(statuses) --
-- lease_held, and the execution in none of the finished {statuses} (one %s each).
SELECT 1 FROM {execution} WHERE id = %s AND lease_owner = %s AND status NOT IN ({statuses}){for_share}

-- read_store_for_waiter --
-- The store row's pk and (instance_id, version) under a share lock: a registration's linearization point.
SELECT id, instance_id, version FROM {storeinstance} WHERE name = %s AND store_id = %s{for_share}

-- upsert_waiter --
-- Register a waiter, or replace the observation of the same (execution, step, store); its pk.
INSERT INTO {waiter} (workflow_id, execution_id, step_key, store_pk, instance_id, since_version, read_paths, created_at, woken_at, cohort) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (execution_id, step_key, store_pk) DO UPDATE SET workflow_id = excluded.workflow_id, instance_id = excluded.instance_id, since_version = excluded.since_version, read_paths = excluded.read_paths, created_at = excluded.created_at, woken_at = excluded.woken_at, cohort = excluded.cohort RETURNING id

-- delete_waiter_paths --
-- Delete a waiter's path rows (before they are written again).
DELETE FROM {waiterpath} WHERE waiter_id = %s

-- insert_waiter_paths(rows) --
-- Write path rows of a waiter: {rows} is one "(%s, %s, %s, %s)" per row, comma-separated.
INSERT INTO {waiterpath} (waiter_id, store_pk, kind, path) VALUES {rows}

-- handed_off --
-- The condition on a waiter w about to be removed that its cohort's next waiter be woken in its place: woken, in a cohort, and its step not recorded on the store (a claim's commit woke the next already).
w.cohort IS NOT NULL AND w.woken_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {appliedstep} a JOIN {storeinstance} s ON s.name = a.store_name AND s.store_id = a.store_id WHERE s.id = w.store_pk AND a.execution_id = w.execution_id AND a.step_key = w.step_key)

-- handed_off_execution_waiters --
-- The (store pk, cohort) of the waiters of an execution whose removal wakes the next of their cohort.
SELECT w.store_pk, w.cohort FROM {waiter} w WHERE w.execution_id = %s AND {handed_off}

-- handed_off_step_waiters(keys) --
-- The (store pk, cohort) of the waiters of an execution's steps ({keys}: one %s per step key) whose removal wakes the next of their cohort.
SELECT w.store_pk, w.cohort FROM {waiter} w WHERE w.execution_id = %s AND w.step_key IN ({keys}) AND {handed_off}

-- woken_cohort_of_step --
-- The cohort of a step's waiter on a store (execution id, step key, store pk) if it is woken: the commit recording that step wakes the next of the cohort.
SELECT cohort FROM {waiter} WHERE execution_id = %s AND step_key = %s AND store_pk = %s AND cohort IS NOT NULL AND woken_at IS NOT NULL

-- next_of_cohort --
-- The first unwoken waiters of a cohort on a store (store pk, cohort, how many), in registration order.
SELECT id, execution_id, workflow_id FROM {waiter} WHERE store_pk = %s AND cohort = %s AND woken_at IS NULL ORDER BY id LIMIT %s

-- delete_execution_waiter_paths --
-- Delete the path rows of an execution's waiters.
DELETE FROM {waiterpath} WHERE waiter_id IN (SELECT id FROM {waiter} WHERE execution_id = %s)

-- delete_execution_waiters --
-- Delete an execution's waiters (after their path rows).
DELETE FROM {waiter} WHERE execution_id = %s

-- delete_step_waiter_paths(keys) --
-- Delete the path rows of the waiters of an execution's steps ({keys}: one %s per step key).
DELETE FROM {waiterpath} WHERE waiter_id IN (SELECT id FROM {waiter} WHERE execution_id = %s AND step_key IN ({keys}))

-- delete_step_waiters(keys) --
-- Delete the waiters of an execution's steps ({keys}: one %s per step key).
DELETE FROM {waiter} WHERE execution_id = %s AND step_key IN ({keys})

-- lock_step_waiters(keys) --
-- Lock the waiters of an execution's steps in registration order (PostgreSQL; {keys}: one %s per step key).
SELECT id FROM {waiter} WHERE execution_id = %s AND step_key IN ({keys}) ORDER BY id FOR UPDATE

-- mark_woken(ids) --
-- Mark woken the waiters {ids} (one %s each) whose rows no other transaction holds (the row count: how many): a commit never waits on a waiter row.
UPDATE {waiter} SET woken_at = %s WHERE id IN (SELECT id FROM {waiter} WHERE id IN ({ids}){for_no_key_update}{skip_locked})

-- delete_store_waiter_paths --
-- Delete the path rows of every waiter on a store (by store pk).
DELETE FROM {waiterpath} WHERE store_pk = %s

-- delete_store_waiters --
-- Delete every waiter on a store (by store pk), after their path rows.
DELETE FROM {waiter} WHERE store_pk = %s

-- list_waiters --
-- The waiters registered on a store (by name and id), in registration order.
SELECT w.workflow_id, w.execution_id, w.step_key, w.instance_id, w.since_version, w.read_paths, w.cohort FROM {waiter} w JOIN {storeinstance} s ON s.id = w.store_pk WHERE s.name = %s AND s.store_id = %s ORDER BY w.id

-- store_waiters --
-- Every waiter on a store (by store pk), in registration order: the waiters a deletion wakes.
SELECT id, execution_id, workflow_id, woken_at, cohort FROM {waiter} WHERE store_pk = %s ORDER BY id

-- probed_waiters(probes) --
-- The waiters found by {probes} (waiter_probe and waiter_path_probe texts joined by UNION ALL), in registration order.
SELECT id, execution_id, workflow_id, woken_at, cohort FROM {waiter} WHERE id IN ({probes}) ORDER BY id

-- waiter_probe(kind) --
-- The waiters of a store (by pk) with a path row of {kind} (a WaiterKind number).
SELECT waiter_id FROM {waiterpath} WHERE store_pk = %s AND kind = {kind}

-- waiter_path_probe(kind) --
-- The waiters of a store (by pk) with a path row of {kind} (a WaiterKind number) and that path key.
SELECT waiter_id FROM {waiterpath} WHERE store_pk = %s AND kind = {kind} AND path = %s


-- ---------------------------------------------------------------------------------------
-- Wake intents (wakes/outbox.py)
-- ---------------------------------------------------------------------------------------

-- intent_columns --
-- The columns an intent is written with, in the order of intent_values.
execution_id, workflow_id, reason, available_at, due_at, delivered_at, attempts, last_error, created_at

-- intent_values --
-- A new intent's intent_columns: execution, workflow, reason, available and due times and creation time as parameters.
%s, %s, %s, %s, %s, NULL, 0, '', %s

-- ack_condition --
-- The intents of one execution (%s) that a run starting at %s satisfies: unacknowledged and due (an immediate wake when written, a timer at due_at).
execution_id = %s AND delivered_at IS NULL AND COALESCE(due_at, created_at) <= %s

-- insert_intent --
-- Write a wake intent; its id.
INSERT INTO {wakeintent} ({intent_columns}) VALUES ({intent_values}) RETURNING id

-- insert_intents --
-- Write a wake intent per execution of two arrays (PostgreSQL): the reason, available and due times and creation time, then the execution ids and their workflow ids; the ids, ascending in the order given.
INSERT INTO {wakeintent} ({intent_columns}) SELECT w.execution_id, w.workflow_id, %s, CAST(%s AS timestamptz), CAST(%s AS timestamptz), NULL, 0, '', CAST(%s AS timestamptz) FROM unnest(CAST(%s AS text[]), CAST(%s AS text[])) WITH ORDINALITY AS w(execution_id, workflow_id, n) ORDER BY w.n RETURNING id

-- insert_timer_unless_pending --
-- insert_intent of a timer, unless the execution has an unacknowledged one of that reason due at that time.
INSERT INTO {wakeintent} ({intent_columns}) SELECT {intent_values} WHERE NOT EXISTS (SELECT 1 FROM {wakeintent} WHERE execution_id = %s AND reason = %s AND due_at = %s AND delivered_at IS NULL) RETURNING id

-- rearm_pending_timer --
-- Make an execution's unacknowledged timer of that reason and due time deliverable then again if a delivery pushed it past.
UPDATE {wakeintent} SET available_at = %s WHERE execution_id = %s AND reason = %s AND due_at = %s AND delivered_at IS NULL AND available_at > %s

-- acknowledge_due --
-- Acknowledge (at %s) the intents a run of the execution satisfies (ack_condition).
UPDATE {wakeintent} SET delivered_at = %s WHERE {ack_condition}

-- acknowledge_due_but --
-- acknowledge_due but one intent (by id: a held lease's takeover timer).
UPDATE {wakeintent} SET delivered_at = %s WHERE {ack_condition} AND id <> %s

-- acknowledge_all --
-- Acknowledge (at %s) every open intent of a finished execution.
UPDATE {wakeintent} SET delivered_at = %s WHERE execution_id = %s AND delivered_at IS NULL

-- acknowledge_all_but --
-- acknowledge_all but one intent (by id).
UPDATE {wakeintent} SET delivered_at = %s WHERE execution_id = %s AND delivered_at IS NULL AND id <> %s

-- intent_deliveries(ids) --
-- The deliveries counted on the intents {ids} (one %s each).
SELECT id, attempts FROM {wakeintent} WHERE id IN ({ids})

-- push_back(ids) --
-- Count a delivery on the unacknowledged intents {ids} (one %s each) and make them deliverable again at %s.
UPDATE {wakeintent} SET attempts = attempts + 1, available_at = %s WHERE id IN ({ids}) AND delivered_at IS NULL

-- push_back_failed(ids) --
-- push_back of a failed delivery: also record its error (the second %s).
UPDATE {wakeintent} SET attempts = attempts + 1, available_at = %s, last_error = %s WHERE id IN ({ids}) AND delivered_at IS NULL

-- push_back_refused(ids) --
-- Record a refused delivery of claimed intents (counted by the claim): deliverable again at %s, with the error.
UPDATE {wakeintent} SET available_at = %s, last_error = %s WHERE id IN ({ids}) AND delivered_at IS NULL

-- claim_due_intents --
-- The relay's claim (PostgreSQL): lock the due intents no other transaction holds, count a delivery on each and push it back by redelivery_delay (a takeover timer, reason %s, by the takeover's). Parameters: now, limit; now, MAX_RETRY_DELAY, the reason, the takeover's first delay, the first delay; the reason.
WITH due AS (SELECT id, available_at FROM {wakeintent} WHERE delivered_at IS NULL AND available_at <= %s ORDER BY available_at, id LIMIT %s FOR UPDATE SKIP LOCKED) UPDATE {wakeintent} AS i SET attempts = i.attempts + 1, available_at = CAST(%s AS timestamptz) + make_interval(secs => LEAST(CAST(%s AS float8), CASE WHEN i.reason = %s THEN CAST(%s AS float8) ELSE CAST(%s AS float8) END * power(2, LEAST(i.attempts, 20)))) FROM due WHERE i.id = due.id RETURNING i.id, i.execution_id, i.workflow_id, i.attempts - 1, due.available_at, i.reason = %s

-- due_intents --
-- The due, unacknowledged intents, oldest first, up to a limit: the relay's claim elsewhere (then push_back).
SELECT id, execution_id, workflow_id, attempts, reason, available_at FROM {wakeintent} WHERE delivered_at IS NULL AND available_at <= %s ORDER BY available_at, id LIMIT %s

-- count_overdue_intents --
-- How many unacknowledged intents were deliverable before %s.
SELECT COUNT(*) FROM {wakeintent} WHERE delivered_at IS NULL AND available_at < %s

-- outbox_depth --
-- The metrics' outbox gauges: how many unacknowledged intents were due at %s (an immediate wake when written, a timer at due_at), and the earliest time one of them was.
SELECT COUNT(*), MIN(COALESCE(due_at, created_at)) FROM {wakeintent} WHERE delivered_at IS NULL AND COALESCE(due_at, created_at) <= %s

-- delete_delivered_intents --
-- Delete the intents acknowledged before %s.
DELETE FROM {wakeintent} WHERE delivered_at IS NOT NULL AND delivered_at < %s

-- delete_delivered_intents_batch --
-- Delete at most %s (the second parameter) intents acknowledged before %s.
DELETE FROM {wakeintent} WHERE id IN (SELECT id FROM {wakeintent} WHERE delivered_at IS NOT NULL AND delivered_at < %s LIMIT %s)


-- ---------------------------------------------------------------------------------------
-- The runtime: leases, the heap (runtime/leases.py, runtime/engine.py; PostgreSQL but the heap writes)
-- ---------------------------------------------------------------------------------------

-- terminal_statuses --
-- One %s per finished execution status (TERMINAL_STATUSES, sorted).
%s, %s, %s

-- lease_fence --
-- The execution (%s) is leased by this run (%s) and not finished (terminal_statuses): a condition on the execution table.
id = %s AND lease_owner = %s AND status NOT IN ({terminal_statuses})

-- rearm_timer --
-- Move one timer (the third %s) to fire at available_at, due_at (the first two) as a new, unacknowledged intent; conditions follow.
UPDATE {wakeintent} SET available_at = %s, due_at = %s, delivered_at = NULL, attempts = 0 WHERE id = %s

-- end_run --
-- End the row of the run that let its lease go (in the release_lease statements, after "released"): ended_at and outcome (%s, %s), then the execution id and the run's lease token.
UPDATE {executionrun} SET ended_at = %s, outcome = %s WHERE execution_id = %s AND lease_owner = %s AND ended_at IS NULL AND EXISTS (SELECT 1 FROM released)

-- cancel_timer --
-- Delete one undelivered intent (by id); conditions follow.
DELETE FROM {wakeintent} WHERE id = %s AND delivered_at IS NULL

-- renew_lease --
-- Extend a held lease to %s (then lease_fence's parameters) and move its takeover timer (rearm_timer's) if it did; one row: the leases extended (0 or 1).
WITH renewed AS (UPDATE {execution} SET lease_expires_at = %s WHERE {lease_fence} RETURNING 1), moved AS ({rearm_timer} AND EXISTS (SELECT 1 FROM renewed) RETURNING 1) SELECT count(*) FROM renewed

-- renew_lease_run_again --
-- renew_lease for another run under the lease: also clear wake_pending and acknowledge (at %s) the due intents (ack_condition) but the timer (by id).
WITH renewed AS (UPDATE {execution} SET lease_expires_at = %s, wake_pending = false WHERE {lease_fence} RETURNING 1), moved AS ({rearm_timer} AND EXISTS (SELECT 1 FROM renewed) RETURNING 1), acked AS (UPDATE {wakeintent} SET delivered_at = %s WHERE {ack_condition} AND id <> %s AND EXISTS (SELECT 1 FROM renewed)) SELECT count(*) FROM renewed

-- release_lease(assignments) --
-- Apply {assignments} and let a held lease go (lease_fence's parameters follow the assignments'), deleting its takeover timer (by id, NULL: none) and ending the run's row (end_run's parameters last); one row: the leases released.
WITH released AS (UPDATE {execution} SET {assignments} WHERE {lease_fence} RETURNING 1), dropped AS ({cancel_timer} AND EXISTS (SELECT 1 FROM released) RETURNING 1), ended AS ({end_run}) SELECT count(*) FROM released

-- release_lease_unless_wake_pending(assignments) --
-- release_lease, unless a wake is flagged (the holder runs again instead).
WITH released AS (UPDATE {execution} SET {assignments} WHERE {lease_fence} AND NOT wake_pending RETURNING 1), dropped AS ({cancel_timer} AND EXISTS (SELECT 1 FROM released) RETURNING 1), ended AS ({end_run}) SELECT count(*) FROM released

-- release_lease_finished(assignments) --
-- release_lease of a finished execution: also acknowledge (at %s) every intent of the execution (%s) if it released.
WITH released AS (UPDATE {execution} SET {assignments} WHERE {lease_fence} RETURNING 1), dropped AS ({cancel_timer} AND EXISTS (SELECT 1 FROM released) RETURNING 1), acked AS (UPDATE {wakeintent} SET delivered_at = %s WHERE execution_id = %s AND delivered_at IS NULL AND EXISTS (SELECT 1 FROM released) RETURNING 1), ended AS ({end_run}) SELECT count(*) FROM released

-- release_lease_finished_unawaited(assignments) --
-- release_lease_finished, unless another execution waits for this one (awaited): then its end and the wake of its waiters commit in one transaction instead.
WITH released AS (UPDATE {execution} SET {assignments} WHERE {lease_fence} AND NOT awaited RETURNING 1), dropped AS ({cancel_timer} AND EXISTS (SELECT 1 FROM released) RETURNING 1), acked AS (UPDATE {wakeintent} SET delivered_at = %s WHERE execution_id = %s AND delivered_at IS NULL AND EXISTS (SELECT 1 FROM released) RETURNING 1), ended AS ({end_run}) SELECT count(*) FROM released

-- acquire_lease(columns, heap, max_read_ahead, relaxed) --
-- Take a free or expired lease of a live execution not queued, acknowledge its due intents, write its takeover timer and its run's row (the worker, the start: two %s after the timer's), and read its heap and the stores it waits on (their state up to {max_read_ahead} bytes), in one statement; {columns}: the execution's returned, {heap}: s.<column> of each heap field, {relaxed}: "" or synchronous_commit_off.
WITH acquired AS (UPDATE {execution} SET lease_owner = %s, lease_expires_at = %s, lease_backend = pg_backend_pid(), wake_pending = false, status = %s, runs = runs + 1, updated_at = %s WHERE id = %s AND status NOT IN ({terminal_statuses}) AND status <> 'queued' AND (lease_owner = '' OR lease_expires_at < %s) RETURNING {columns}), acked AS (UPDATE {wakeintent} SET delivered_at = %s WHERE {ack_condition} AND EXISTS (SELECT 1 FROM acquired)), timer AS (INSERT INTO {wakeintent} ({intent_columns}) SELECT id, workflow_id, %s, %s, %s, NULL, 0, '', %s FROM acquired RETURNING id), run AS (INSERT INTO {executionrun} (execution_id, number, lease_owner, worker, started_at, ended_at, outcome) SELECT id, runs, lease_owner, %s, %s, NULL, '' FROM acquired) SELECT acquired.*, timer.id, (SELECT COALESCE(json_agg(json_build_array({heap}) ORDER BY s.position), '[]'::json) FROM {executionstep} s WHERE s.execution_id = acquired.id), (SELECT COALESCE(json_agg(json_build_array(w.step_key, i.name, i.store_id, i.instance_id, i.version, i.state, a.result)), '[]'::json) FROM {waiter} w JOIN {storeinstance} i ON i.id = w.store_pk LEFT JOIN {appliedstep} a ON a.store_name = i.name AND a.store_id = i.store_id AND a.execution_id = w.execution_id AND a.step_key = w.step_key WHERE w.execution_id = acquired.id AND octet_length(i.state) <= {max_read_ahead}) FROM acquired, timer{relaxed}

-- execution_trace_context --
-- The W3C traceparent stored with an execution's start ("": none); no row if there is no such execution.
SELECT trace_context FROM {execution} WHERE id = %s

-- execution_trace_contexts(ids) --
-- The id and stored start traceparent of each execution of {ids} (one %s each): a group of resumes' in one statement.
SELECT id, trace_context FROM {execution} WHERE id IN ({ids})

-- insert_children --
-- Create pending executions of one workflow under one parent (PostgreSQL): the workflow, status, parent, deadline and creation time (their updated_at too), then their ids and arguments as two arrays.
INSERT INTO {execution} (id, workflow_id, status, input_json, result_json, error_json, waiting_on, lease_owner, wake_pending, runs, parent, deadline, created_at, updated_at) SELECT c.id, %s, %s, c.input_json, '', '', '', '', false, 0, %s, CAST(%s AS timestamptz), CAST(%s AS timestamptz), CAST(%s AS timestamptz) FROM unnest(CAST(%s AS text[]), CAST(%s AS text[])) AS c(id, input_json)

-- wake_waiters(ids) --
-- The end of the executions {ids} (one %s each) as their waiters see it (PostgreSQL): delete the wait rows on them, count each live waiter's awaiting down (terminal_statuses follow), and return the waiters that wait for nothing more (id, workflow id).
WITH gone AS (DELETE FROM {childwait} WHERE awaited_id IN ({ids}) RETURNING execution_id), counts AS (SELECT execution_id, count(*) AS n FROM gone GROUP BY execution_id), counted AS (UPDATE {execution} e SET awaiting = GREATEST(e.awaiting - counts.n, 0) FROM counts WHERE e.id = counts.execution_id AND e.status NOT IN ({terminal_statuses}) RETURNING e.id, e.workflow_id, e.awaiting) SELECT id, workflow_id FROM counted WHERE awaiting = 0 ORDER BY id

-- lock_blockers --
-- The backends (PostgreSQL) that hold a lock another backend of this database waits for: the relay's first look for frozen lease holders, cheap (pg_stat_activity only).
SELECT DISTINCT b.pid FROM pg_stat_activity w, LATERAL unnest(pg_blocking_pids(w.pid)) AS b(pid) WHERE w.datname = current_database() AND w.wait_event_type = 'Lock'

-- terminate_frozen_holders(pids) --
-- End the backends among {pids} (one %s each; the conditions checked before any is ended) that took the lease of an execution that is still leased but expired before %s (a run whose worker stopped renewing it), that were connected before the lease expired (not a backend started later with the pid again) and are in a transaction (their locks): the execution id and the pid of each.
WITH frozen AS MATERIALIZED (SELECT e.id, a.pid FROM {execution} e JOIN pg_stat_activity a ON a.pid = e.lease_backend WHERE e.lease_backend IN ({pids}) AND e.lease_owner <> '' AND e.lease_expires_at < %s AND a.backend_start < e.lease_expires_at AND a.xact_start IS NOT NULL AND a.pid <> pg_backend_pid()) SELECT id, pid FROM frozen WHERE pg_terminate_backend(pid)

-- synchronous_commit_off --
-- acquire_lease's {relaxed} in autocommit: its commit does not wait for the WAL flush.
, (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed

-- update_step_fenced(assignments) --
-- Apply {assignments} to a pending heap row (id, status, attempts: three %s after the assignments') if nobody moved it on and the run holds the lease (lease_fence).
UPDATE {executionstep} SET {assignments} WHERE id = %s AND status = %s AND attempts = %s AND EXISTS (SELECT 1 FROM {execution} WHERE {lease_fence})

-- insert_step_fenced(columns, values) --
-- Write a heap row ({columns}, {values}: one cast %s each) while the run holds the lease (lease_fence); nothing if the step is recorded.
INSERT INTO {executionstep} ({columns}) SELECT {values} WHERE EXISTS (SELECT 1 FROM {execution} WHERE {lease_fence}) ON CONFLICT (execution_id, step_key) DO NOTHING

-- current_lock_timeout --
-- The transaction's lock_timeout (PostgreSQL), to put back later.
SELECT current_setting('lock_timeout')

-- give_way_lock_timeout(ms) --
-- Wait at most {ms} milliseconds for a lock for the rest of the transaction (PostgreSQL).
SET LOCAL lock_timeout = '{ms}ms'

-- set_lock_timeout --
-- Set lock_timeout to %s for the rest of the transaction (PostgreSQL).
SELECT set_config('lock_timeout', %s, true)


-- ---------------------------------------------------------------------------------------
-- Queues (runtime/queues.py)
-- ---------------------------------------------------------------------------------------

-- queue_take_slot --
-- Take a slot of queue %s (concurrency %s, or none) if it is not paused, nobody waits and one is free, creating its row at its first start (updated_at %s); a row when it took one. Locks the queue's row either way.
INSERT INTO {queuestate} (name, paused, running, waiting, next_seq, concurrency, per_key, rate_limit, rate_seconds, updated_at) VALUES (%s, false, 1, 0, 0, %s, NULL, NULL, NULL, %s) ON CONFLICT (name) DO UPDATE SET running = {queuestate}.running + 1, concurrency = excluded.concurrency, per_key = NULL, rate_limit = NULL, rate_seconds = NULL, updated_at = excluded.updated_at WHERE NOT {queuestate}.paused AND {queuestate}.waiting = 0 AND (excluded.concurrency IS NULL OR {queuestate}.running < excluded.concurrency) RETURNING running

-- queue_lock --
-- Lock queue %s's row, creating it or writing its definition's limits (concurrency, per_key, rate limit, rate seconds: four %s) and updated_at (%s); its counters and limits.
INSERT INTO {queuestate} (name, paused, running, waiting, next_seq, concurrency, per_key, rate_limit, rate_seconds, updated_at) VALUES (%s, false, 0, 0, 0, %s, %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency, per_key = excluded.per_key, rate_limit = excluded.rate_limit, rate_seconds = excluded.rate_seconds, updated_at = excluded.updated_at RETURNING paused, running, waiting, next_seq, concurrency, per_key, rate_limit, rate_seconds

-- queue_release_slot --
-- Free a slot of queue %s (an admitted execution finished), locking its row; its counters and limits.
UPDATE {queuestate} SET running = CASE WHEN running > 0 THEN running - 1 ELSE 0 END WHERE name = %s RETURNING paused, running, waiting, next_seq, concurrency, per_key, rate_limit, rate_seconds


-- ---------------------------------------------------------------------------------------
-- Retention (retention.py, management/commands/yieldstar_prune.py)
-- ---------------------------------------------------------------------------------------

-- finished_executions --
-- A batch of executions finished (terminal_statuses) before %s, oldest first, but those with a held claim lease (state %s), up to %s, locked unless another transaction holds them.
SELECT id FROM {execution} e WHERE status IN ({terminal_statuses}) AND finished_at < %s AND NOT EXISTS (SELECT 1 FROM {claimleaserecord} c WHERE c.execution_id = e.id AND c.state = %s) ORDER BY finished_at LIMIT %s{for_update}{skip_locked}

-- prune_steps(ids) --
-- Delete the heap rows of the executions {ids} (one %s each).
DELETE FROM {executionstep} WHERE execution_id IN ({ids})

-- prune_runs(ids) --
-- Delete the run rows of the executions {ids}.
DELETE FROM {executionrun} WHERE execution_id IN ({ids})

-- prune_ledger_rows(ids) --
-- Delete the ledger rows of the executions {ids}.
DELETE FROM {appliedstep} WHERE execution_id IN ({ids})

-- prune_intents(ids) --
-- Delete the wake intents of the executions {ids}.
DELETE FROM {wakeintent} WHERE execution_id IN ({ids})

-- prune_waiter_paths(ids) --
-- Delete the path rows of the waiters of the executions {ids}.
DELETE FROM {waiterpath} WHERE waiter_id IN (SELECT id FROM {waiter} WHERE execution_id IN ({ids}))

-- prune_waiters(ids) --
-- Delete the waiters of the executions {ids} (after their path rows).
DELETE FROM {waiter} WHERE execution_id IN ({ids})

-- prune_claim_leases(ids) --
-- Delete the claim leases of the executions {ids}.
DELETE FROM {claimleaserecord} WHERE execution_id IN ({ids})

-- prune_child_waits(ids) --
-- Delete what the executions {ids} wait for (step.wait rows).
DELETE FROM {childwait} WHERE execution_id IN ({ids})

-- prune_executions(ids) --
-- Delete the executions {ids} that are finished (terminal_statuses), checked again under the lock.
DELETE FROM {execution} WHERE id IN ({ids}) AND status IN ({terminal_statuses})

-- prune_versions_over_limit --
-- Delete the history rows more than %s versions behind their store's current one.
DELETE FROM {storeversion} WHERE id IN (SELECT v.id FROM {storeversion} v JOIN {storeinstance} s ON s.instance_id = v.instance_id WHERE v.version <= s.version - %s)

-- prune_versions_of_deleted_stores --
-- Delete the history rows of store instances that no longer exist.
DELETE FROM {storeversion} WHERE instance_id NOT IN (SELECT instance_id FROM {storeinstance})


-- ---------------------------------------------------------------------------------------
-- Stores that end: retention of idle stores, delivery counts of leased claims
-- ---------------------------------------------------------------------------------------

-- store_unused --
-- The condition that store s has no waiter and no claim lease held on it (state %s).
NOT EXISTS (SELECT 1 FROM {waiter} w WHERE w.store_pk = s.id) AND NOT EXISTS (SELECT 1 FROM {claimleaserecord} c WHERE c.store_name = s.name AND c.store_id = s.store_id AND c.state = %s)

-- idle_stores --
-- A batch of the stores of one name (%s) after a store id (%s), untouched since %s and unused (store_unused), up to %s in id order, locked unless another transaction holds them.
SELECT s.id, s.store_id FROM {storeinstance} s WHERE s.name = %s AND s.store_id > %s AND s.updated_at < %s AND {store_unused} ORDER BY s.store_id LIMIT %s{for_update}{skip_locked}

-- delete_idle_stores(ids) --
-- Delete the stores {ids} (pks, locked) still untouched since %s and unused (store_unused): checked again by this later statement, which sees every commit made before the locks were granted.
DELETE FROM {storeinstance} WHERE id IN (SELECT s.id FROM {storeinstance} s WHERE s.id IN ({ids}) AND s.updated_at < %s AND {store_unused})

-- count_claim_expiry --
-- One more expired lease of a value (store name, store id, instance id, value digest), at %s.
INSERT INTO {claimdelivery} (store_name, store_id, instance_id, value_digest, expiries, updated_at) VALUES (%s, %s, %s, %s, 1, %s) ON CONFLICT (store_name, store_id, instance_id, value_digest) DO UPDATE SET expiries = {claimdelivery}.expiries + 1, updated_at = excluded.updated_at

-- prune_claim_deliveries_of_deleted_stores --
-- Delete the delivery counts of store instances that no longer exist.
DELETE FROM {claimdelivery} WHERE instance_id NOT IN (SELECT instance_id FROM {storeinstance})


-- ---------------------------------------------------------------------------------------
-- Elsewhere
-- ---------------------------------------------------------------------------------------

-- release_idempotency_key --
-- Forget an idempotency key's claim (by pk) unless a retry shared it meanwhile (shared = %s: false).
DELETE FROM {idempotencykey} WHERE id = %s AND shared = %s

-- begin_immediate --
-- Open a transaction holding the database write lock from the start (SQLite).
BEGIN IMMEDIATE

-- begin_exclusive --
-- begin_immediate for a connection whose transaction_mode is EXCLUSIVE (SQLite).
BEGIN EXCLUSIVE

-- grown_tables --
-- Those of the tables (%s: their names) changed by more than %s rows beyond their size at their last ANALYZE (PostgreSQL).
SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid WHERE s.relid = ANY (ARRAY(SELECT to_regclass(t) FROM unnest(%s::text[]) AS t)) AND s.n_mod_since_analyze > %s + greatest(c.reltuples, 0) ORDER BY s.relname

-- analyze_table(table) --
-- Refresh the planner statistics of {table} (a quoted name), unless another process holds it (PostgreSQL).
ANALYZE (SKIP_LOCKED) {table}

-- estimated_rows --
-- The planner's row estimate of a table (%s: its quoted name; PostgreSQL).
SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)
