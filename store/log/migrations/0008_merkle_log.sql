-- The sequencer's Merkle log (store/evidence/merkle_log.py, docs/audit.md "Merkle log", ADR 0029): one leaf
-- per event in log (commit) order, the perfect subtrees of the RFC 9162 tree over them, and the
-- signed checkpoints of it. The leaves, their nodes and the sequencer's position (the highest
-- log_position) are written in one transaction.
CREATE TABLE {schema}.longhaul_merkle_leaves (
    leaf_index bigint PRIMARY KEY,
    log_position bigint NOT NULL UNIQUE,
    task_id uuid NOT NULL,
    version bigint NOT NULL,
    chain_hash bytea NOT NULL,
    UNIQUE (task_id, version)
);

-- A perfect subtree of 2**level leaves from position * 2**level (level 0 is one leaf's hash).
CREATE TABLE {schema}.longhaul_merkle_nodes (
    level smallint NOT NULL,
    position bigint NOT NULL,
    hash bytea NOT NULL,
    PRIMARY KEY (level, position)
);

-- Every signed checkpoint, one per tree size: the C2SP signed note exactly as published.
CREATE TABLE {schema}.longhaul_checkpoints (
    tree_size bigint PRIMARY KEY,
    root_hash bytea NOT NULL,
    note text NOT NULL,
    signed_at timestamptz NOT NULL
);

-- Tasks purged by `longhaul archive` after their archive file verified: their leaves stay in the
-- tree, and `longhaul verify` takes their absence from the log for a purge, not a deletion.
CREATE TABLE {schema}.longhaul_purged_tasks (
    task_id uuid PRIMARY KEY,
    last_version bigint NOT NULL,
    archive_file text NOT NULL,
    purged_at timestamptz NOT NULL
);

-- The sequencer's position in the log: the last notification id it has sequenced (an event
-- without a chain hash is passed over, so the position can be past the last leaf's).
CREATE TABLE {schema}.longhaul_sequencer_position (
    id smallint PRIMARY KEY CHECK (id = 1),
    log_position bigint NOT NULL
);
