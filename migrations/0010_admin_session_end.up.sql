-- A site admin may end anyone's edit session from the dashboard; the
-- session's page then says so (reason 'admin').
ALTER TABLE code_sessions DROP CONSTRAINT code_sessions_reason_known;
ALTER TABLE code_sessions ADD CONSTRAINT code_sessions_reason_known
    CHECK (close_reason IN ('discarded', 'idle', 'max_age', 'archived', 'submitted', 'project_deleted', 'admin'));
