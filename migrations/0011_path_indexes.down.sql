-- The indexes are rebuilt from git on demand; forgetting them loses nothing.
DELETE FROM stored_objects WHERE key LIKE 'indexes/%';
ALTER TABLE stored_objects DROP CONSTRAINT stored_objects_key_format;
ALTER TABLE stored_objects ADD CONSTRAINT stored_objects_key_format
    CHECK (key ~ '^(trees|blobs)/[0-9a-f]{40}$');
