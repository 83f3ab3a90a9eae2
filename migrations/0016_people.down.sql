-- Sessions ended because their person was disabled read as ended by a site
-- admin once the reason is gone, which they were.
UPDATE code_sessions SET close_reason = 'admin' WHERE close_reason = 'disabled';
ALTER TABLE code_sessions DROP CONSTRAINT code_sessions_reason_known;
ALTER TABLE code_sessions ADD CONSTRAINT code_sessions_reason_known
    CHECK (close_reason IN ('discarded', 'idle', 'max_age', 'archived', 'submitted', 'project_deleted', 'admin', 'revoked'));
DROP TABLE password_resets;
ALTER TABLE users DROP COLUMN disabled_at;
