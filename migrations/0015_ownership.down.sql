-- Sessions ended because their person lost access read as discarded once
-- the reason is gone.
UPDATE code_sessions SET close_reason = 'discarded' WHERE close_reason = 'revoked';
ALTER TABLE code_sessions DROP CONSTRAINT code_sessions_reason_known;
ALTER TABLE code_sessions ADD CONSTRAINT code_sessions_reason_known
    CHECK (close_reason IN ('discarded', 'idle', 'max_age', 'archived', 'submitted', 'project_deleted', 'admin'));
DROP TABLE owner_invitations;
DROP TRIGGER projects_creator_fixed ON projects;
DROP FUNCTION projects_creator_fixed();
DROP INDEX projects_created_by;
