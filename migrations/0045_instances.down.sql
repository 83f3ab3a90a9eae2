DROP INDEX code_sessions_runtime_instance;
ALTER TABLE code_sessions DROP COLUMN runtime_instance;
DROP TABLE instances;
