-- The per-task hash chain of events (store/evidence/chain.py, docs/audit.md "Chain"): one row per event,
-- written by the append's transaction (store/log/postgres.py). A table of its own beside the
-- library's events table, whose insert statement is the library's (ADR 0022).
CREATE TABLE {schema}.longhaul_event_chain (
    task_id uuid NOT NULL,
    version bigint NOT NULL,
    hash bytea NOT NULL,
    PRIMARY KEY (task_id, version)
);

-- Events stored before this migration are chained here, with the hash store/evidence/chain.py computes:
-- sha256("longhaul-chain-v1\n" || task id || version (int8) || len(topic) (int4) || topic
-- || len(state) (int4) || state || previous hash), from version 1 of each task upwards, with
-- 32 zero bytes before version 1. A task without a version 1 is left unchained (verify names it).
INSERT INTO {schema}.longhaul_event_chain (task_id, version, hash)
WITH RECURSIVE chained (task_id, version, hash) AS (
    SELECT e.originator_id, e.originator_version, sha256(
        decode('6c6f6e676861756c2d636861696e2d76310a', 'hex') || uuid_send(e.originator_id)
        || int8send(e.originator_version::int8)
        || int4send(octet_length(convert_to(e.topic, 'UTF8'))) || convert_to(e.topic, 'UTF8')
        || int4send(octet_length(e.state)) || e.state || decode(repeat('00', 32), 'hex'))
    FROM {schema}.longhaul_events e WHERE e.originator_version = 1
    UNION ALL
    SELECT e.originator_id, e.originator_version, sha256(
        decode('6c6f6e676861756c2d636861696e2d76310a', 'hex') || uuid_send(e.originator_id)
        || int8send(e.originator_version::int8)
        || int4send(octet_length(convert_to(e.topic, 'UTF8'))) || convert_to(e.topic, 'UTF8')
        || int4send(octet_length(e.state)) || e.state || c.hash)
    FROM chained c JOIN {schema}.longhaul_events e
        ON e.originator_id = c.task_id AND e.originator_version = c.version + 1
)
SELECT task_id, version, hash FROM chained;
