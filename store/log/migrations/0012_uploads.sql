-- Which tenant uploaded which file (store/files/uploads.py): a client's upload (POST /a2a/files)
-- puts the bytes in the file store by hash and a row here, so that a message of that tenant, and
-- of no other, may refer to the upload's URL. One row per tenant and hash; an upload of the same
-- bytes again refreshes the row.
CREATE TABLE {schema}.longhaul_uploads (
    tenant text NOT NULL,
    sha256 text NOT NULL,
    size bigint NOT NULL,
    media_type text NOT NULL,
    filename text,
    uploaded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, sha256)
);

-- Old uploads no task refers to, for the purge.
CREATE INDEX longhaul_uploads_uploaded_at ON {schema}.longhaul_uploads (uploaded_at);
