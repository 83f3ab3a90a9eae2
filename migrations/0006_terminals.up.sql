-- Interactive terminals: a lease per shell, heartbeated by the server
-- process that runs it. Shells do not survive that process.

CREATE TABLE terminals (
    id           text        PRIMARY KEY,
    session_id   text        NOT NULL REFERENCES code_sessions (id) ON DELETE CASCADE,
    user_id      bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    instance     text        NOT NULL,
    state        text        NOT NULL DEFAULT 'live',
    opened_at    timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    closed_at    timestamptz,
    CONSTRAINT terminals_id_format CHECK (id ~ '^term_[0-9a-f]{32}$'),
    -- lost: the process that ran it went away without closing it.
    CONSTRAINT terminals_state_known CHECK (state IN ('live', 'closed', 'lost')),
    CONSTRAINT terminals_closed_at_when_ended CHECK ((state = 'live') = (closed_at IS NULL))
);
CREATE INDEX terminals_live_by_session ON terminals (session_id) WHERE state = 'live';
CREATE INDEX terminals_live_by_instance ON terminals (instance) WHERE state = 'live';
