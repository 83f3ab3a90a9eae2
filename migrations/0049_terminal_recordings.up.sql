-- Recordings of terminals, asciicast v2 files in the object store: one row
-- each, made when its owner starts it. Only the owner sees a recording
-- until they share it with the project.
CREATE TABLE terminal_recordings (
    id          bigserial   PRIMARY KEY,
    project_id  bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    user_id     bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    session_id  text        NOT NULL REFERENCES code_sessions (id) ON DELETE CASCADE,
    terminal_id text        NOT NULL,
    -- recording: under way; saved: its object is stored; failed: the
    -- recording ended but could not be stored.
    state       text        NOT NULL DEFAULT 'recording',
    started_at  timestamptz NOT NULL,
    ended_at    timestamptz,
    bytes       bigint      NOT NULL DEFAULT 0,
    -- It reached ATELIER_RECORDING_MAX_BYTES and stopped there.
    truncated   boolean     NOT NULL DEFAULT false,
    shared      boolean     NOT NULL DEFAULT false,
    object_key  text,
    CONSTRAINT terminal_recordings_state_known CHECK (state IN ('recording', 'saved', 'failed')),
    CONSTRAINT terminal_recordings_ended_when_done CHECK ((state = 'recording') = (ended_at IS NULL)),
    CONSTRAINT terminal_recordings_object_when_saved CHECK ((state = 'saved') = (object_key IS NOT NULL)),
    CONSTRAINT terminal_recordings_bytes_positive CHECK (bytes >= 0),
    CONSTRAINT terminal_recordings_terminal_format CHECK (terminal_id ~ '^term_[0-9a-f]{32}$')
);
-- One recording at a time per terminal.
CREATE UNIQUE INDEX terminal_recordings_one_running ON terminal_recordings (terminal_id) WHERE state = 'recording';
CREATE INDEX terminal_recordings_by_session ON terminal_recordings (session_id);
CREATE INDEX terminal_recordings_shared ON terminal_recordings (project_id) WHERE shared;

-- A recording's row going (deleted by its owner, or with its project,
-- session or person) lists its object for the collector to delete: the
-- store never keeps a recording nobody can reach.
CREATE FUNCTION terminal_recordings_doom_object() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO gc_doomed (key, size) VALUES (OLD.object_key, OLD.bytes) ON CONFLICT (key) DO NOTHING;
    RETURN OLD;
END $$;
CREATE TRIGGER terminal_recordings_doom_object AFTER DELETE ON terminal_recordings
    FOR EACH ROW WHEN (OLD.object_key IS NOT NULL) EXECUTE FUNCTION terminal_recordings_doom_object();
