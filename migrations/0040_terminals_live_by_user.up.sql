-- A person's live shells are counted, on every instance together, each
-- time they open one.
CREATE INDEX terminals_live_by_user ON terminals (user_id) WHERE state = 'live';
