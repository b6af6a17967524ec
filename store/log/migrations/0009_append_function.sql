-- The append in one statement (store/log/postgres.py, ADR 0031): the run-queue rows, the task keys,
-- the events table's lock, the NOTIFY, the events (their notification ids returned, in the
-- order of the arrays) and their chain rows, in this order, run by one call in autocommit, so
-- the lock is held for server time only: no client round trip between LOCK and COMMIT. The
-- statements are those the recorder ran one by one before; an error in any of them (a unique
-- violation: a lost race) aborts the call, and nothing is written.
CREATE FUNCTION {schema}.longhaul_append(
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
) RETURNS SETOF bigint LANGUAGE plpgsql AS $body$
BEGIN
    -- Before the lock, as before this function: the rows are locked before the table, by every
    -- append alike.
    INSERT INTO {schema}.longhaul_run_queue AS q (task_id, version, tenant, state, skill,
        skill_version, next_step, lease_owner, lease_until, deadline, updated_at, expired)
    SELECT * FROM unnest(queue_ids, queue_versions, queue_tenants, queue_states, queue_skills,
        queue_skill_versions, queue_next_steps, queue_lease_owners, queue_lease_untils,
        queue_deadlines, queue_updated_ats, queue_expired)
    ON CONFLICT (task_id) DO UPDATE SET version = EXCLUDED.version, state = EXCLUDED.state,
        next_step = EXCLUDED.next_step, lease_owner = EXCLUDED.lease_owner,
        lease_until = EXCLUDED.lease_until, deadline = EXCLUDED.deadline,
        updated_at = EXCLUDED.updated_at, expired = EXCLUDED.expired
    WHERE q.version < EXCLUDED.version;
    -- A key inserted twice for one task is a unique violation: a lost race (store/secrets/task_keys.py).
    INSERT INTO {schema}.longhaul_task_keys (task_id, tenant, key_id, key)
    SELECT * FROM unnest(key_task_ids, key_tenants, key_ids, key_keys);
    DELETE FROM {schema}.longhaul_task_keys WHERE task_id = ANY(keys_destroyed);
    -- The library's lock (eventsourcing's PostgresApplicationRecorder._lock_table): appends take
    -- their notification ids and commit one at a time, so the log's order is the commit order.
    PERFORM set_config('lock_timeout', lock_timeout, true);
    LOCK TABLE {schema}.longhaul_events IN EXCLUSIVE MODE;
    PERFORM pg_notify(channel, '');
    RETURN QUERY INSERT INTO {schema}.longhaul_events (originator_id, originator_version, topic, state)
    SELECT * FROM unnest(event_ids, event_versions, event_topics, event_states)
    RETURNING notification_id;
    -- After the events: a lost race is the conflict on the events' key.
    INSERT INTO {schema}.longhaul_event_chain (task_id, version, hash)
    SELECT * FROM unnest(chain_ids, chain_versions, chain_hashes);
END;
$body$;
