-- Each task's secret key (store/secrets/task_keys.py), outside the event log: the log keeps only the
-- ciphertext of the secrets a client sends (store/secrets/secret_parts.py). A row is inserted by the
-- append that stores a task's first secret and deleted by the append that ends the task, in the
-- same transaction; `longhaul erase --tenant T` deletes a tenant's rows (ADR 0024).
-- 0007, not 0006: 0006 is taken by the hash chain of another branch; the runner applies every
-- migration not yet recorded, so the order of merging does not matter.
CREATE TABLE {schema}.longhaul_task_keys (
    task_id uuid PRIMARY KEY,
    tenant text NOT NULL,
    key_id text NOT NULL,
    key bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- `longhaul erase --tenant T`.
CREATE INDEX longhaul_task_keys_tenant ON {schema}.longhaul_task_keys (tenant);
