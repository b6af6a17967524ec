-- The append in one statement, now able to keep a group whose race for one task was lost
-- (store/log/postgres.py, ADR 0037). It replaces 0009's longhaul_append, whose statements it runs in
-- the same order, with one argument more in front: keep_others.
--
-- keep_others false (save_tasks: all or nothing): as 0009, a unique violation (a lost race)
-- aborts the call, and nothing is written.
--
-- keep_others true (save_each: the worker's group commits): before the table lock, the call locks
-- the run-queue rows of the group's tasks, in task-id order. Every append writes the row of each
-- task it appends to, so once these rows are held no other append of these tasks can commit
-- before this call does, and every one that committed before is visible to the next statement:
-- the tasks whose first new event is already stored (or that already have a key this call would
-- insert) are the ones that lost, exactly. Nothing of theirs is written (events, chain rows,
-- run-queue rows, keys inserted or destroyed); the others are appended as 0009 appends a group.
-- The call returns one row per lost task (n null, lost its id) and one per stored event (n its
-- notification id, in the order of the arrays; lost null). A task whose race this check cannot
-- see (a new task without a run-queue row yet, submitted twice at once) still meets the events'
-- primary key: the call aborts, nothing is written, and the caller saves the group task by task.
DROP FUNCTION {schema}.longhaul_append(text, text, uuid[], bigint[], text[], bytea[], uuid[],
    bigint[], bytea[], uuid[], bigint[], text[], text[], text[], int[], int[], text[],
    timestamptz[], timestamptz[], timestamptz[], boolean[], uuid[], text[], text[], bytea[], uuid[]);

CREATE FUNCTION {schema}.longhaul_append(
    keep_others boolean,
    lock_timeout text,
    channel text,
    event_ids uuid[],
    event_versions bigint[],
    event_topics text[],
    event_states bytea[],
    chain_ids uuid[],
    chain_versions bigint[],
    chain_hashes bytea[],
    queue_ids uuid[],
    queue_versions bigint[],
    queue_tenants text[],
    queue_states text[],
    queue_skills text[],
    queue_skill_versions int[],
    queue_next_steps int[],
    queue_lease_owners text[],
    queue_lease_untils timestamptz[],
    queue_deadlines timestamptz[],
    queue_updated_ats timestamptz[],
    queue_expired boolean[],
    key_task_ids uuid[],
    key_tenants text[],
    key_ids text[],
    key_keys bytea[],
    keys_destroyed uuid[]
) RETURNS TABLE (n bigint, lost uuid) LANGUAGE plpgsql AS $body$
DECLARE
    losers uuid[] := ARRAY[]::uuid[];
BEGIN
    IF keep_others THEN
        -- The rows first, one order for every group (two groups never wait for each other in a
        -- circle); FOR UPDATE waits for an append holding one to commit, and the next statement
        -- sees what it wrote.
        PERFORM 1 FROM {schema}.longhaul_run_queue WHERE task_id = ANY(queue_ids)
            ORDER BY task_id FOR UPDATE;
        losers := ARRAY(
            SELECT DISTINCT e.originator_id FROM {schema}.longhaul_events e
            JOIN unnest(event_ids, event_versions) AS k(id, version)
            ON e.originator_id = k.id AND e.originator_version = k.version
            UNION
            SELECT t.task_id FROM {schema}.longhaul_task_keys t WHERE t.task_id = ANY(key_task_ids)
        );
        RETURN QUERY SELECT NULL::bigint, l FROM unnest(losers) AS l;
        IF cardinality(losers) = cardinality(ARRAY(SELECT DISTINCT unnest(event_ids))) THEN
            RETURN;  -- every task lost: nothing to lock or write
        END IF;
    END IF;
    -- Before the lock, as in 0009: the rows are locked before the table, by every append alike.
    INSERT INTO {schema}.longhaul_run_queue AS q (task_id, version, tenant, state, skill,
        skill_version, next_step, lease_owner, lease_until, deadline, updated_at, expired)
    SELECT * FROM unnest(queue_ids, queue_versions, queue_tenants, queue_states, queue_skills,
        queue_skill_versions, queue_next_steps, queue_lease_owners, queue_lease_untils,
        queue_deadlines, queue_updated_ats, queue_expired) AS r(task_id, version, tenant, state,
        skill, skill_version, next_step, lease_owner, lease_until, deadline, updated_at, expired)
    WHERE r.task_id <> ALL(losers)
    ON CONFLICT (task_id) DO UPDATE SET version = EXCLUDED.version, state = EXCLUDED.state,
        next_step = EXCLUDED.next_step, lease_owner = EXCLUDED.lease_owner,
        lease_until = EXCLUDED.lease_until, deadline = EXCLUDED.deadline,
        updated_at = EXCLUDED.updated_at, expired = EXCLUDED.expired
    WHERE q.version < EXCLUDED.version;
    -- A key inserted twice for one task is a unique violation: a lost race (store/secrets/task_keys.py).
    INSERT INTO {schema}.longhaul_task_keys (task_id, tenant, key_id, key)
    SELECT * FROM unnest(key_task_ids, key_tenants, key_ids, key_keys) AS k(task_id, tenant, key_id, key)
    WHERE k.task_id <> ALL(losers);
    DELETE FROM {schema}.longhaul_task_keys WHERE task_id = ANY(keys_destroyed)
        AND task_id <> ALL(losers);
    -- The library's lock (eventsourcing's PostgresApplicationRecorder._lock_table): appends take
    -- their notification ids and commit one at a time, so the log's order is the commit order.
    PERFORM set_config('lock_timeout', lock_timeout, true);
    LOCK TABLE {schema}.longhaul_events IN EXCLUSIVE MODE;
    PERFORM pg_notify(channel, '');
    RETURN QUERY INSERT INTO {schema}.longhaul_events (originator_id, originator_version, topic, state)
    SELECT * FROM unnest(event_ids, event_versions, event_topics, event_states)
        AS e(originator_id, originator_version, topic, state)
    WHERE e.originator_id <> ALL(losers)
    RETURNING notification_id, NULL::uuid;
    -- After the events: a lost race is the conflict on the events' key.
    INSERT INTO {schema}.longhaul_event_chain (task_id, version, hash)
    SELECT * FROM unnest(chain_ids, chain_versions, chain_hashes) AS c(task_id, version, hash)
    WHERE c.task_id <> ALL(losers);
END;
$body$;
