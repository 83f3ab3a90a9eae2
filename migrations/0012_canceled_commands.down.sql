ALTER TABLE code_session_commands DROP COLUMN canceled;
