DROP TABLE published_commits;
DROP TABLE stored_objects;
ALTER TABLE projects DROP CONSTRAINT projects_canonical_commit_format;
ALTER TABLE projects DROP COLUMN canonical_commit;
