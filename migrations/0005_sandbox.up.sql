-- Each edit session runs its commands as a uid of its own, and each project
-- says whether its sandbox may reach the network.

ALTER TABLE projects ADD COLUMN sandbox_network text NOT NULL DEFAULT 'deny';
ALTER TABLE projects ADD CONSTRAINT projects_sandbox_network_known CHECK (sandbox_network IN ('deny', 'allow'));

-- The offset within the configured uid range; the uid is base + slot.
ALTER TABLE code_sessions ADD COLUMN sandbox_slot integer;
ALTER TABLE code_sessions ADD CONSTRAINT code_sessions_sandbox_slot_range CHECK (sandbox_slot >= 0);
-- No two sessions that may still have processes or files share a uid.
CREATE UNIQUE INDEX code_sessions_sandbox_slot_live ON code_sessions (sandbox_slot) WHERE state <> 'closed';
