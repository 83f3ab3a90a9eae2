-- A Local project's folder as admitted at creation: its path with every
-- symlink resolved, and the device and inode found there. Every read walks
-- to that path without following links and compares the two numbers, so a
-- folder moved or replaced after creation is never read. dev_t and ino_t
-- are unsigned 64-bit; they are stored bit for bit in bigint.
--
-- Rows from before this migration have none; the server records them at
-- start-up for the folders that pass today's creation rules, and never
-- reads the others.

ALTER TABLE projects
    ADD COLUMN workspace_real_path text,
    ADD COLUMN workspace_dev       bigint,
    ADD COLUMN workspace_ino       bigint,
    ADD CONSTRAINT projects_workspace_identity_whole CHECK (
        (workspace_real_path IS NULL) = (workspace_dev IS NULL)
        AND (workspace_dev IS NULL) = (workspace_ino IS NULL)),
    ADD CONSTRAINT projects_workspace_identity_local CHECK (
        workspace_mode = 'local' OR workspace_real_path IS NULL);
