-- The relay's position in the log, per JetStream stream (workers/relay.py).
-- IF NOT EXISTS: schemas made before versioned migrations already have it.
CREATE TABLE IF NOT EXISTS {schema}.longhaul_relay_position (
    stream text PRIMARY KEY,
    position bigint NOT NULL
);
