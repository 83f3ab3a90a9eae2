-- Event streams open now, a row each, so that a person's bound on open
-- streams holds on every instance together. A row of an instance that is
-- gone counts no more, and goes when the instance is declared gone.
CREATE TABLE open_streams (
    id        bigserial   PRIMARY KEY,
    user_id   bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    instance  text        NOT NULL,
    opened_at timestamptz NOT NULL,
    CONSTRAINT open_streams_instance_length CHECK (length(instance) BETWEEN 1 AND 100)
);
CREATE INDEX open_streams_by_user ON open_streams (user_id);
CREATE INDEX open_streams_by_instance ON open_streams (instance);
