-- A command its session's owner stopped is listed as cancelled, not by the
-- exit status the stop left it with.
ALTER TABLE code_session_commands ADD COLUMN canceled boolean NOT NULL DEFAULT false;
