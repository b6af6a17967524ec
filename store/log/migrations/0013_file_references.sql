-- Which stored files are still held, so that a file leaves the file store once nothing holds it
-- (store/evidence/file_retention.py, docs/operations.md "Files: retention, archive, erase, verify").

-- The file index (projections/file_index.py): per task that refers to stored files, their hashes.
-- Written by the projector with its position in one transaction, like the current-task view
-- (0003); a task's row goes with the task when it is purged, or when its tenant is erased. One
-- GIN lookup answers "does any task still refer to this file".
CREATE TABLE {schema}.longhaul_file_index (
    task_id uuid PRIMARY KEY,
    files text[] NOT NULL,
    position bigint NOT NULL
);

CREATE INDEX longhaul_file_index_files ON {schema}.longhaul_file_index USING gin (files);

CREATE TABLE {schema}.longhaul_file_index_tracking (
    application_name text PRIMARY KEY,
    notification_id bigint
);

-- The library's single-row tracking format (see 0003).
INSERT INTO {schema}.longhaul_file_index_tracking VALUES ('__migration__', 1);

-- Files whose last holder may be gone: written by the purge (in its transaction) and by erase,
-- deleted once each file was looked at (deleted from the file store, or found still held).
CREATE TABLE {schema}.longhaul_file_deletions (
    sha256 text PRIMARY KEY,
    since timestamptz NOT NULL
);

-- Files an archive names by reference only (`longhaul archive --files-by-reference`): they stay
-- in the file store for that archive, whatever else lets go of them (erase excepted).
CREATE TABLE {schema}.longhaul_archived_files (
    sha256 text NOT NULL,
    archive_file text NOT NULL,
    archived_at timestamptz NOT NULL,
    PRIMARY KEY (sha256, archive_file)
);

-- Tasks whose tenant was erased (`longhaul erase`): their files were deleted from the file store
-- (unless another task holds them), so `verify` and `archive` tell an erased file from a lost one.
CREATE TABLE {schema}.longhaul_erased_tasks (
    task_id uuid PRIMARY KEY,
    tenant text NOT NULL,
    erased_at timestamptz NOT NULL
);
