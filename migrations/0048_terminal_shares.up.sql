-- A terminal's owner shows it, read-only, to members of the project: a row
-- per person who may watch. Revoking deletes the row; the shares go with
-- the terminal's lease and with the person.
CREATE TABLE terminal_shares (
    terminal_id text        NOT NULL REFERENCES terminals (id) ON DELETE CASCADE,
    user_id     bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    shared_at   timestamptz NOT NULL,
    PRIMARY KEY (terminal_id, user_id)
);
CREATE INDEX terminal_shares_by_user ON terminal_shares (user_id);
