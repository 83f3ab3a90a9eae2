-- Changes (ADR 0029's submit): a person's edits become one Change with one
-- human ChangeSet; only a Change with passing Evidence reaches canonical.

-- The command that verifies a Change (e.g. `go test ./...`); NULL means an
-- owner or admin approves each Change by hand.
ALTER TABLE projects ADD COLUMN check_command text;
ALTER TABLE projects ADD CONSTRAINT projects_check_command_length
    CHECK (check_command IS NULL OR char_length(check_command) BETWEEN 1 AND 1000);

CREATE TABLE changes (
    id           bigserial   PRIMARY KEY,
    project_id   bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    author_id    bigint      REFERENCES users (id) ON DELETE SET NULL,
    -- The edit session it came from; NULL for a single-file edit of the
    -- Code page. Not a foreign key: the session row may go with its project.
    session_id   text,
    message      text        NOT NULL,
    base_commit  text        NOT NULL,
    commit_sha   text        NOT NULL,
    paths        jsonb       NOT NULL,
    status       text        NOT NULL DEFAULT 'composed',
    -- Why a Change does not move on by itself: it waits for an approval,
    -- or for a Local folder's work tree to be clean.
    wait_reason  text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    released_at  timestamptz,
    CONSTRAINT changes_status_known CHECK (status IN ('composed', 'verifying', 'verified', 'failed', 'released', 'withdrawn', 'superseded')),
    CONSTRAINT changes_wait_reason_known CHECK (wait_reason IN ('approval', 'dirty_worktree')),
    CONSTRAINT changes_released_at_when_released CHECK ((status = 'released') = (released_at IS NOT NULL)),
    CONSTRAINT changes_commits_format CHECK (base_commit ~ '^[0-9a-f]{40}$' AND commit_sha ~ '^[0-9a-f]{40}$'),
    CONSTRAINT changes_message_length CHECK (char_length(message) BETWEEN 1 AND 10000),
    CONSTRAINT changes_paths_present CHECK (jsonb_typeof(paths) = 'array' AND jsonb_array_length(paths) BETWEEN 1 AND 200)
);
-- One session yields at most one Change: a repeat submit meets this index.
CREATE UNIQUE INDEX changes_one_per_session ON changes (session_id) WHERE session_id IS NOT NULL;
CREATE INDEX changes_project ON changes (project_id, id);
-- Changes still on their way (the dashboard's "waiting" and the restart's
-- "verify again" both read this).
CREATE INDEX changes_unfinished ON changes (status) WHERE status IN ('composed', 'verifying', 'verified');

-- The sets of edits a Change is made of; a submit makes one human set.
CREATE TABLE change_sets (
    id         bigserial   PRIMARY KEY,
    change_id  bigint      NOT NULL REFERENCES changes (id) ON DELETE CASCADE,
    kind       text        NOT NULL,
    author_id  bigint      REFERENCES users (id) ON DELETE SET NULL,
    commit_sha text        NOT NULL,
    -- The commands the session ran, from its audit (never their output).
    commands   jsonb       NOT NULL DEFAULT '[]',
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT change_sets_kind_known CHECK (kind IN ('human')),
    CONSTRAINT change_sets_commit_format CHECK (commit_sha ~ '^[0-9a-f]{40}$')
);
CREATE UNIQUE INDEX change_sets_one_human ON change_sets (change_id) WHERE kind = 'human';

-- What a Change's commit was shown to do: a check's run, or a person's
-- approval. Rows are never changed.
CREATE TABLE evidence (
    id          bigserial   PRIMARY KEY,
    change_id   bigint      NOT NULL REFERENCES changes (id) ON DELETE CASCADE,
    commit_sha  text        NOT NULL,
    kind        text        NOT NULL,
    passed      boolean     NOT NULL,
    command     text,
    exit_code   integer,
    duration_ms bigint,
    output_tail text,
    approved_by bigint      REFERENCES users (id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT evidence_kind_known CHECK (kind IN ('check', 'approval')),
    CONSTRAINT evidence_commit_format CHECK (commit_sha ~ '^[0-9a-f]{40}$'),
    CONSTRAINT evidence_check_complete CHECK (kind <> 'check' OR (command IS NOT NULL AND exit_code IS NOT NULL AND duration_ms >= 0 AND passed = (exit_code = 0))),
    CONSTRAINT evidence_approval_passes CHECK (kind <> 'approval' OR (passed AND command IS NULL)),
    CONSTRAINT evidence_tail_length CHECK (octet_length(output_tail) <= 65536)
);
CREATE INDEX evidence_change ON evidence (change_id, id);

-- The pipeline's moves, and the rule that a verified or released Change has
-- passing evidence for the very commit it carries: canonical only ever
-- moves to such a commit, whoever writes the row.
CREATE FUNCTION changes_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' AND NEW.status NOT IN ('composed', 'verifying') THEN
        RAISE EXCEPTION 'a change starts composed, not %', NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'changes_status_transition';
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.status <> OLD.status AND NOT (
        (OLD.status = 'composed'  AND NEW.status IN ('verifying', 'verified', 'withdrawn', 'superseded')) OR
        (OLD.status = 'verifying' AND NEW.status IN ('verified', 'failed', 'withdrawn', 'superseded')) OR
        (OLD.status = 'verified'  AND NEW.status IN ('released', 'composed', 'withdrawn', 'superseded')) OR
        (OLD.status = 'failed'    AND NEW.status IN ('withdrawn', 'superseded'))
    ) THEN
        RAISE EXCEPTION 'a change does not move from % to %', OLD.status, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'changes_status_transition';
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.status = 'released' AND (NEW.commit_sha <> OLD.commit_sha OR NEW.base_commit <> OLD.base_commit) THEN
        RAISE EXCEPTION 'a released change keeps its commit'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'changes_status_transition';
    END IF;
    IF NEW.status IN ('verified', 'released') AND NOT EXISTS (
        SELECT 1 FROM evidence e WHERE e.change_id = NEW.id AND e.commit_sha = NEW.commit_sha AND e.passed
    ) THEN
        RAISE EXCEPTION 'change % has no passing evidence for %', NEW.id, NEW.commit_sha
            USING ERRCODE = 'check_violation', CONSTRAINT = 'changes_verified_needs_evidence';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER changes_guard BEFORE INSERT OR UPDATE ON changes FOR EACH ROW EXECUTE FUNCTION changes_guard();
