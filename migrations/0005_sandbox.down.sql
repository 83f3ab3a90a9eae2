DROP INDEX code_sessions_sandbox_slot_live;
ALTER TABLE code_sessions DROP CONSTRAINT code_sessions_sandbox_slot_range;
ALTER TABLE code_sessions DROP COLUMN sandbox_slot;
ALTER TABLE projects DROP CONSTRAINT projects_sandbox_network_known;
ALTER TABLE projects DROP COLUMN sandbox_network;
