ALTER TABLE projects
    DROP CONSTRAINT projects_workspace_identity_local,
    DROP CONSTRAINT projects_workspace_identity_whole,
    DROP COLUMN workspace_ino,
    DROP COLUMN workspace_dev,
    DROP COLUMN workspace_real_path;
