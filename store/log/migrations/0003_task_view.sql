-- The current-task view that ListTasks reads (projections/task_view.py), one row per task, and the
-- position in the log it reflects. Both are written by the projector in one transaction per event.
-- The tracking table has the shape of eventsourcing's single-row PostgresTrackingRecorder table; its
-- '__migration__' row is what that recorder's own create_table would write, so the library
-- recognises the table as already in the single-row format (longhaul never runs that create_table).
CREATE TABLE {schema}.longhaul_task_view (
    task_id uuid PRIMARY KEY,
    tenant text NOT NULL,
    context_id text NOT NULL,
    state text NOT NULL,
    status_timestamp timestamptz NOT NULL,
    skill text NOT NULL,
    skill_version int NOT NULL,
    expired boolean NOT NULL DEFAULT false,
    version bigint NOT NULL,
    position bigint NOT NULL
);

-- ListTasks: a tenant's tasks, newest status first, then id (the page cursor).
CREATE INDEX longhaul_task_view_list ON {schema}.longhaul_task_view
    (tenant, status_timestamp DESC, task_id DESC);

CREATE INDEX longhaul_task_view_context ON {schema}.longhaul_task_view
    (tenant, context_id, status_timestamp DESC, task_id DESC);

CREATE TABLE {schema}.longhaul_task_view_tracking (
    application_name text PRIMARY KEY,
    notification_id bigint
);

INSERT INTO {schema}.longhaul_task_view_tracking VALUES ('__migration__', 1);
