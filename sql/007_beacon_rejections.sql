-- Authentic web beacons the log does not take (docs/CLIENT.md, "Web beacons"): fetched after
-- their expiry, or whose event breaks a rule of /v1/events. They are never counted; this table
-- says which beacons arrived too late and how often, so a publisher can lengthen expiresIn.
-- One row per event id: a reload or a second click on the same expired link adds an attempt.
CREATE TABLE beacon_rejections (
    event_id          text        PRIMARY KEY,
    type              text,
    request_id        text,
    reason            text        NOT NULL CHECK (reason IN ('expired', 'invalid')),
    message           text        NOT NULL,
    event             jsonb       NOT NULL,
    destination       text,
    expires_at        timestamptz NOT NULL,
    issuer            text        NOT NULL,
    first_received_at timestamptz NOT NULL,
    last_received_at  timestamptz NOT NULL,
    attempts          integer     NOT NULL DEFAULT 1
);
CREATE INDEX beacon_rejections_last_received ON beacon_rejections (last_received_at);
