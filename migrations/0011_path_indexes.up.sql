-- Quick open reads one flat path index per root tree, stored beside the
-- trees it lists and named by the same sha.
ALTER TABLE stored_objects DROP CONSTRAINT stored_objects_key_format;
ALTER TABLE stored_objects ADD CONSTRAINT stored_objects_key_format
    CHECK (key ~ '^(trees|blobs|indexes)/[0-9a-f]{40}$');
