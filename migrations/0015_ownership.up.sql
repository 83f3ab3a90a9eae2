-- Ownership is given only with consent, and the bound on projects a person
-- may hold counts what they created.
--
-- The bound counts projects by created_by, so that column is written once:
-- moving a project onto someone else's count (or off one's own) would undo
-- the bound. The foreign key's ON DELETE SET NULL still clears it when the
-- account goes. Rows whose creator is unknown count on nobody's bound.
CREATE INDEX projects_created_by ON projects (created_by);

CREATE FUNCTION projects_creator_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.created_by IS NOT NULL AND NEW.created_by IS DISTINCT FROM OLD.created_by THEN
        RAISE EXCEPTION 'the creator of project % is recorded once', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'projects_creator_fixed';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER projects_creator_fixed BEFORE UPDATE OF created_by ON projects
    FOR EACH ROW EXECUTE FUNCTION projects_creator_fixed();

-- An owner's offer of the owner role to someone, pending until that person
-- accepts (they become an owner) or declines. Members and project admins
-- are added directly; only ownership waits for consent. An offer stands
-- while its author is an owner of the project: leaving or stepping down
-- withdraws the offers one made (the service deletes them in the same
-- transaction), and an account's deletion takes its offers with it.
CREATE TABLE owner_invitations (
    project_id bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    user_id    bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    invited_by bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, user_id),
    CONSTRAINT owner_invitations_not_self CHECK (user_id <> invited_by)
);
CREATE INDEX owner_invitations_user_id ON owner_invitations (user_id);
CREATE INDEX owner_invitations_invited_by ON owner_invitations (project_id, invited_by);

-- A person who leaves a project, is removed from it or loses the right to
-- edit it has their open session there ended at once (reason 'revoked'):
-- a project's sessions pause while it is archived, and one its person can
-- no longer reach would otherwise hold a place in their bound for as long.
ALTER TABLE code_sessions DROP CONSTRAINT code_sessions_reason_known;
ALTER TABLE code_sessions ADD CONSTRAINT code_sessions_reason_known
    CHECK (close_reason IN ('discarded', 'idle', 'max_age', 'archived', 'submitted', 'project_deleted', 'admin', 'revoked'));
