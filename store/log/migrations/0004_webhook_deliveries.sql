-- Webhook deliveries (store/deliveries/records.py): one row per event x push config, written by the
-- dispatcher before it acknowledges the event's NATS message, and every attempt to deliver it.
-- Operators' and auditors' record, not part of any task's event stream. A lane is one
-- (task_id, config_id): its rows are delivered in version order, and only the lane's oldest
-- pending row can be claimed (claimed_by / claimed_until: a dispatcher's lease on it).
CREATE TABLE {schema}.longhaul_deliveries (
    id bigserial PRIMARY KEY,
    webhook_id text NOT NULL UNIQUE,
    task_id uuid NOT NULL,
    tenant text NOT NULL,
    version bigint NOT NULL,
    event_type text NOT NULL,
    event_time timestamptz NOT NULL,
    config_id text NOT NULL,
    url text NOT NULL,
    body text NOT NULL,
    state text NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'delivered', 'gave_up', 'refused')),
    attempts int NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL,
    next_attempt_at timestamptz NOT NULL,
    claimed_by text,
    claimed_until timestamptz,
    last_status int,
    last_error text,
    finished_at timestamptz,
    UNIQUE (task_id, config_id, version)
);

-- The lanes' pending rows, oldest version first (the claim looks for each lane's head here).
CREATE INDEX longhaul_deliveries_pending ON {schema}.longhaul_deliveries
    (task_id, config_id, version) WHERE state = 'pending';

-- Due rows, soonest first.
CREATE INDEX longhaul_deliveries_due ON {schema}.longhaul_deliveries
    (next_attempt_at) WHERE state = 'pending';

CREATE TABLE {schema}.longhaul_delivery_attempts (
    delivery_id bigint NOT NULL REFERENCES {schema}.longhaul_deliveries (id) ON DELETE CASCADE,
    attempt int NOT NULL,
    started_at timestamptz NOT NULL,
    duration_ms double precision NOT NULL,
    http_status int,
    error text,
    outcome text NOT NULL,
    dispatcher text NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);
