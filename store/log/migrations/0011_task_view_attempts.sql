-- The current-task view counts the failed attempts at each task's current step, with the last
-- failure, for `longhaul retrying` (projections/task_view.py). Rows written before hold 0 and
-- null, which is right: no StepAttemptFailed event existed before this version.
ALTER TABLE {schema}.longhaul_task_view
    ADD COLUMN failed_attempts int NOT NULL DEFAULT 0,
    ADD COLUMN last_failure text;

-- longhaul retrying: the tasks with failed attempts (few), newest status first.
CREATE INDEX longhaul_task_view_retrying ON {schema}.longhaul_task_view
    (status_timestamp DESC, task_id DESC) WHERE failed_attempts > 0;
