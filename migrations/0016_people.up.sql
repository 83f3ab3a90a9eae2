-- Site admins manage people: an account may be disabled, and a forgotten
-- password is reset through a one-time link.
--
-- A disabled account signs in nowhere: its sign-ins are deleted when it is
-- disabled, and a sign-in is read only with an account that is not.
ALTER TABLE users ADD COLUMN disabled_at timestamptz;

-- A link a site admin made for someone to set a new password once. The
-- link carries a random token; only its SHA-256 is stored, so the table
-- does not hold a usable link. One link a person: a new one replaces it.
CREATE TABLE password_resets (
    token_hash bytea       PRIMARY KEY,
    user_id    bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_by bigint      REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    CONSTRAINT password_resets_token_hash_length CHECK (octet_length(token_hash) = 32),
    CONSTRAINT password_resets_expire_later CHECK (expires_at > created_at)
);
CREATE UNIQUE INDEX password_resets_user_id ON password_resets (user_id);

-- A disabled person's open sessions end with them (reason 'disabled').
ALTER TABLE code_sessions DROP CONSTRAINT code_sessions_reason_known;
ALTER TABLE code_sessions ADD CONSTRAINT code_sessions_reason_known
    CHECK (close_reason IN ('discarded', 'idle', 'max_age', 'archived', 'submitted', 'project_deleted', 'admin', 'revoked', 'disabled'));
