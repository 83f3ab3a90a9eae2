-- Edit sessions (ADR 0029) and the event log.

CREATE TABLE events (
    id         bigserial   PRIMARY KEY,
    type       text        NOT NULL,
    project_id bigint      REFERENCES projects (id) ON DELETE CASCADE,
    actor_id   bigint      REFERENCES users (id) ON DELETE SET NULL,
    data       jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT events_type_format CHECK (type ~ '^[a-z]+(\.[a-z_]+)+$')
);
CREATE INDEX events_project_id ON events (project_id, id);

-- A session's id is edit_<hex>; its fork is the git service repository
-- edit-<hex>, derived from the id alone. A closed session stays as a
-- tombstone (so its URLs answer 410 with the reason) until the project goes.
CREATE TABLE code_sessions (
    id           text        PRIMARY KEY,
    project_id   bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    user_id      bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    base_commit  text        NOT NULL,
    state        text        NOT NULL DEFAULT 'open',
    close_reason text,
    opened_at    timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    closed_at    timestamptz,
    CONSTRAINT code_sessions_id_format CHECK (id ~ '^edit_[0-9a-f]{32}$'),
    CONSTRAINT code_sessions_base_commit_format CHECK (base_commit ~ '^[0-9a-f]{40}$'),
    -- ending: the reason is decided and cleanup runs (and may be retried);
    -- closed: nothing of the session is left but this row.
    CONSTRAINT code_sessions_state_known CHECK (state IN ('open', 'ending', 'closed')),
    CONSTRAINT code_sessions_reason_known CHECK (close_reason IN ('discarded', 'idle', 'max_age', 'archived', 'submitted', 'project_deleted')),
    CONSTRAINT code_sessions_reason_when_ended CHECK ((state = 'open') = (close_reason IS NULL)),
    CONSTRAINT code_sessions_closed_at_when_closed CHECK ((state = 'closed') = (closed_at IS NOT NULL))
);
-- One open session per person per project: two concurrent opens cannot both win.
CREATE UNIQUE INDEX code_sessions_one_open ON code_sessions (project_id, user_id) WHERE state = 'open';
CREATE INDEX code_sessions_unfinished ON code_sessions (state) WHERE state <> 'closed';

-- One row per changed path: the full content exactly as sent, or a deletion.
CREATE TABLE code_session_files (
    session_id text        NOT NULL REFERENCES code_sessions (id) ON DELETE CASCADE,
    path       text        NOT NULL,
    content    bytea,
    deleted    boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, path),
    CONSTRAINT code_session_files_content_or_deleted CHECK (deleted = (content IS NULL)),
    CONSTRAINT code_session_files_size CHECK (octet_length(content) <= 262144),
    CONSTRAINT code_session_files_path_length CHECK (octet_length(path) BETWEEN 1 AND 4096)
);

-- The audit of commands run in a session: never their output.
CREATE TABLE code_session_commands (
    id          bigserial   PRIMARY KEY,
    session_id  text        NOT NULL REFERENCES code_sessions (id) ON DELETE CASCADE,
    command     text        NOT NULL,
    folder      text        NOT NULL DEFAULT '',
    exit_code   integer     NOT NULL,
    duration_ms bigint      NOT NULL CHECK (duration_ms >= 0),
    started_at  timestamptz NOT NULL
);
CREATE INDEX code_session_commands_session_id ON code_session_commands (session_id);
