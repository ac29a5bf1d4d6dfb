-- API keys. Only a SHA-256 hash of each key is stored; the key itself is shown once.
CREATE TABLE api_keys (
    name       text        PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9._-]{1,64}$'),
    scope      text        NOT NULL CHECK (scope IN ('ingest', 'report')),
    key_hash   bytea       NOT NULL UNIQUE,
    key_prefix text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
