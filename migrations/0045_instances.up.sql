-- Several server processes (instances) may share one database. Each has a
-- row while it lives: its heartbeat says it does, and an instance whose
-- heartbeat is late, or that stopped, or whose place another instance took
-- at start, is gone (stopped_at set). What it held (sandbox reservations,
-- sessions' runtimes) is released by whoever sees it gone, once; one
-- declared gone for lateness that was alive after all records itself live
-- again and holds nothing.
--
-- place names the host-local things an instance owns (its sandbox area,
-- its uids): one live instance per place, so an instance that starts on a
-- place knows every earlier one of that place is gone.
CREATE TABLE instances (
    id           text        PRIMARY KEY,
    place        text        NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    stopped_at   timestamptz,
    CONSTRAINT instances_id_length CHECK (length(id) BETWEEN 1 AND 100),
    CONSTRAINT instances_place_length CHECK (length(place) BETWEEN 1 AND 4096),
    CONSTRAINT instances_beat_after_start CHECK (heartbeat_at >= started_at)
);
CREATE UNIQUE INDEX instances_one_live_per_place ON instances (place) WHERE stopped_at IS NULL;

-- The instance that holds a session's runtime (its checkout, commands and
-- shells); NULL while none does. Only a live instance claims one, and a
-- claim of a gone instance is free for the taking.
ALTER TABLE code_sessions ADD COLUMN runtime_instance text;
CREATE INDEX code_sessions_runtime_instance ON code_sessions (runtime_instance) WHERE runtime_instance IS NOT NULL;
