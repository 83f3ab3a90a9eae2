DROP TABLE gc_doomed;
DROP TABLE gc_marks;
ALTER TABLE published_commits DROP COLUMN tree_bytes;
ALTER TABLE stored_objects DROP COLUMN used_at;
