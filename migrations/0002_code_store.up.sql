-- The canonical commit of each project, and the index of what the object
-- store holds, so publishing never lists the bucket.

ALTER TABLE projects ADD COLUMN canonical_commit text;
ALTER TABLE projects ADD CONSTRAINT projects_canonical_commit_format
    CHECK (canonical_commit IS NULL OR canonical_commit ~ '^[0-9a-f]{40}$');

-- Content-addressed objects ("trees/<sha>", "blobs/<sha>") known to be in the
-- object store. Rows are written only after the object is stored.
CREATE TABLE stored_objects (
    key       text        PRIMARY KEY,
    size      bigint      NOT NULL CHECK (size >= 0),
    stored_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT stored_objects_key_format CHECK (key ~ '^(trees|blobs)/[0-9a-f]{40}$')
);

-- A commit whose whole tree is in the object store. Commits are immutable,
-- so a row never changes.
CREATE TABLE published_commits (
    commit_sha   text        PRIMARY KEY,
    root_tree    text        NOT NULL,
    published_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT published_commits_sha_format CHECK (commit_sha ~ '^[0-9a-f]{40}$' AND root_tree ~ '^[0-9a-f]{40}$')
);
