-- The monthly sandbox meter (ADR 0029): sandbox-seconds per project per
-- calendar month in UTC, reserved before a command starts and settled to the
-- awake time it added.

-- NULL takes SANDBOX_MONTHLY_SECONDS; 0 turns the project's sandbox off.
ALTER TABLE projects ADD COLUMN sandbox_monthly_seconds bigint;
ALTER TABLE projects ADD CONSTRAINT projects_sandbox_monthly_seconds_nonnegative
    CHECK (sandbox_monthly_seconds IS NULL OR sandbox_monthly_seconds >= 0);

-- One row per project and month, made by the month's first reservation.
-- reserved_seconds is always the sum of the month's open reservations below;
-- the cap is enforced by the conditional UPDATE that reserves, because the
-- cap itself lives in projects and in the configuration.
CREATE TABLE usage_counters (
    project_id       bigint NOT NULL,
    month            date   NOT NULL,
    used_seconds     bigint NOT NULL DEFAULT 0,
    reserved_seconds bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, month),
    CONSTRAINT usage_counters_project_id_fkey FOREIGN KEY (project_id) REFERENCES projects (id) ON DELETE CASCADE,
    CONSTRAINT usage_counters_month_first_day CHECK (extract(day FROM month) = 1),
    CONSTRAINT usage_counters_used_nonnegative CHECK (used_seconds >= 0),
    CONSTRAINT usage_counters_reserved_nonnegative CHECK (reserved_seconds >= 0)
);

-- The end of the project's current idle tail (NULL until the first
-- settlement). It belongs to the project's one Sandbox, not to a month: a
-- tail that runs past midnight on the last day of a month still covers the
-- next month's first command. Settling locks this row, so two settlements of
-- one project never both see the same tail.
CREATE TABLE sandbox_awake (
    project_id  bigint      PRIMARY KEY,
    awake_until timestamptz,
    CONSTRAINT sandbox_awake_project_id_fkey FOREIGN KEY (project_id) REFERENCES projects (id) ON DELETE CASCADE
);

-- An open reservation: seconds held on the counter of (project_id, month)
-- until the holder settles it. Settling deletes the row. instance names the
-- server process that holds it, so that the next process can settle what a
-- crashed one left open.
CREATE TABLE sandbox_reservations (
    id         bigserial   PRIMARY KEY,
    project_id bigint      NOT NULL,
    month      date        NOT NULL,
    seconds    bigint      NOT NULL,
    started_at timestamptz NOT NULL,
    instance   text        NOT NULL,
    CONSTRAINT sandbox_reservations_counter_fkey FOREIGN KEY (project_id, month)
        REFERENCES usage_counters (project_id, month) ON DELETE CASCADE,
    CONSTRAINT sandbox_reservations_seconds_positive CHECK (seconds > 0),
    CONSTRAINT sandbox_reservations_instance_length CHECK (char_length(instance) BETWEEN 1 AND 100)
);
CREATE INDEX sandbox_reservations_instance ON sandbox_reservations (instance);
