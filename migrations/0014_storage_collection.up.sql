-- The object store is collected: objects that no live tree needs are
-- deleted by a mark and sweep (storage/codestore/collect.go tells the
-- protocol in full).

-- When a publish last stored or relied on the object. A publish sets it on
-- every object it finds stored before it counts on it (a claim); the
-- collector deletes only rows older than its grace, re-checked under the
-- row's lock, so an object a publish claimed is never swept under it.
ALTER TABLE stored_objects ADD COLUMN used_at timestamptz;
UPDATE stored_objects SET used_at = stored_at;
ALTER TABLE stored_objects ALTER COLUMN used_at SET NOT NULL;
ALTER TABLE stored_objects ALTER COLUMN used_at SET DEFAULT now();

-- The bytes of the commit's files, each path counted as a checkout holds
-- them: what its project's code takes. NULL for commits published before it
-- was recorded, until the publish pass measures them.
ALTER TABLE published_commits ADD COLUMN tree_bytes bigint;
ALTER TABLE published_commits ADD CONSTRAINT published_commits_tree_bytes_positive
    CHECK (tree_bytes IS NULL OR tree_bytes >= 0);

-- One collection's marks: every key a live tree names. A pass empties it
-- first; only the pass that holds the collector's advisory lock writes it.
-- Unlogged: a crash loses only a pass, which starts over.
CREATE UNLOGGED TABLE gc_marks (
    key text PRIMARY KEY
);

-- Objects whose row is gone and whose deletion from the store is under
-- way. A publish that needs one of these keys removes its row here before
-- it uploads, which waits for a collector deleting it, so an upload never
-- lands before a deletion of the same key.
CREATE TABLE gc_doomed (
    key       text        PRIMARY KEY,
    size      bigint      NOT NULL CHECK (size >= 0),
    doomed_at timestamptz NOT NULL DEFAULT now()
);
