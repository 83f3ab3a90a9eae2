-- Per-person rate bounds (imports per hour) count a person's recent events
-- of one type; without this index that count scans the whole event log.
CREATE INDEX events_actor_type_time ON events (actor_id, type, created_at) WHERE actor_id IS NOT NULL;
