-- The run queue: one row per task, upserted by the append transaction (store/log/postgres.py).
-- Each partial index serves one query: claims, due pauses, due expiries, live skill versions.
-- IF NOT EXISTS: schemas made before versioned migrations already have all of this.
CREATE TABLE IF NOT EXISTS {schema}.longhaul_run_queue (
    task_id uuid PRIMARY KEY,
    version bigint NOT NULL,
    tenant text NOT NULL,
    state text NOT NULL,
    skill text NOT NULL,
    skill_version int NOT NULL,
    next_step int NOT NULL,
    lease_owner text,
    lease_until timestamptz,
    deadline timestamptz,
    updated_at timestamptz NOT NULL,
    expired boolean NOT NULL DEFAULT false
);

CREATE INDEX IF NOT EXISTS longhaul_run_queue_claim ON {schema}.longhaul_run_queue
    (lease_until NULLS FIRST, updated_at)
    WHERE state IN ('TASK_STATE_SUBMITTED', 'TASK_STATE_WORKING');

CREATE INDEX IF NOT EXISTS longhaul_run_queue_deadline ON {schema}.longhaul_run_queue
    (deadline)
    WHERE state IN ('TASK_STATE_AUTH_REQUIRED', 'TASK_STATE_INPUT_REQUIRED');

CREATE INDEX IF NOT EXISTS longhaul_run_queue_retention ON {schema}.longhaul_run_queue
    (updated_at)
    WHERE state IN ('TASK_STATE_CANCELED', 'TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_REJECTED')
    AND NOT expired;

CREATE INDEX IF NOT EXISTS longhaul_run_queue_live ON {schema}.longhaul_run_queue
    (skill, skill_version)
    WHERE state NOT IN ('TASK_STATE_CANCELED', 'TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_REJECTED');
