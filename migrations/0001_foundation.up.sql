-- Users, sign-in sessions, projects (ADR 0072) and project membership.

CREATE TABLE users (
    id            bigserial PRIMARY KEY,
    username      text        NOT NULL,
    password_hash text        NOT NULL,
    is_admin      boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT users_username_format CHECK (username ~ '^[a-z0-9][a-z0-9_.-]{0,31}$')
);
CREATE UNIQUE INDEX users_username_key ON users (username);

-- The cookie carries a random token; only its SHA-256 is stored, so a leaked
-- table does not leak live sessions.
CREATE TABLE login_sessions (
    token_hash  bytea       PRIMARY KEY,
    user_id     bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    csrf_token  text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    CONSTRAINT login_sessions_token_hash_length CHECK (octet_length(token_hash) = 32)
);
CREATE INDEX login_sessions_user_id ON login_sessions (user_id);
CREATE INDEX login_sessions_expires_at ON login_sessions (expires_at);

CREATE TABLE projects (
    id                 bigserial   PRIMARY KEY,
    name               text        NOT NULL,
    workspace_dir_name text        NOT NULL,
    workspace_mode     text        NOT NULL DEFAULT 'container',
    workspace_path     text,
    status             text        NOT NULL DEFAULT 'active',
    created_by         bigint      REFERENCES users (id) ON DELETE SET NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    archived_at        timestamptz,
    CONSTRAINT projects_name_length CHECK (char_length(name) BETWEEN 1 AND 100),
    CONSTRAINT projects_workspace_dir_name_format CHECK (workspace_dir_name ~ '^[A-Za-z0-9_-]{1,64}$'),
    CONSTRAINT projects_workspace_mode_known CHECK (workspace_mode IN ('container', 'local')),
    -- ADR 0072: mode and path are one decision. A local project without a
    -- path has no root; a container project with one has two sources of truth.
    CONSTRAINT projects_workspace_path_matches_mode CHECK ((workspace_mode = 'local') = (workspace_path IS NOT NULL)),
    CONSTRAINT projects_status_known CHECK (status IN ('active', 'archived')),
    CONSTRAINT projects_archived_at_matches_status CHECK ((status = 'archived') = (archived_at IS NOT NULL))
);
CREATE UNIQUE INDEX projects_workspace_dir_name_key ON projects (workspace_dir_name);

CREATE TABLE project_members (
    project_id bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    user_id    bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, user_id),
    CONSTRAINT project_members_role_known CHECK (role IN ('owner', 'admin', 'member'))
);
CREATE INDEX project_members_user_id ON project_members (user_id);
