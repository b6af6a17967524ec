-- The retention index the sweeper searches (projections/retention_index.py): one row per task, from
-- its Submitted event, with the time retention counts from once the task is terminal. Written by
-- the projector with its position in one transaction per event, like the current-task view (0003).
-- 0005, not 0004: 0004 is taken by the push deliveries of another branch; the runner applies
-- every migration not yet recorded, so the order of merging does not matter.
CREATE TABLE {schema}.longhaul_retention_index (
    task_id uuid PRIMARY KEY,
    tenant text NOT NULL,
    skill text NOT NULL,
    ended_at timestamptz,
    expired boolean NOT NULL DEFAULT false,
    position bigint NOT NULL
);

-- The sweeper's search: terminal, not expired tasks by the time they ended, then id (its cursor).
CREATE INDEX longhaul_retention_index_due ON {schema}.longhaul_retention_index (ended_at, task_id)
    WHERE ended_at IS NOT NULL AND NOT expired;

CREATE TABLE {schema}.longhaul_retention_index_tracking (
    application_name text PRIMARY KEY,
    notification_id bigint
);

INSERT INTO {schema}.longhaul_retention_index_tracking VALUES ('__migration__', 1);
