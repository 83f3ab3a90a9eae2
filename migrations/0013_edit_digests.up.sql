-- A digest of each edit's content, kept by PostgreSQL itself, so the
-- runtime can tell which edits its checkout already holds without reading
-- up to the session's path limit of 256 KiB files on every command.
ALTER TABLE code_session_files
    ADD COLUMN content_sha256 bytea GENERATED ALWAYS AS (sha256(content)) STORED;
