DROP TABLE sandbox_reservations;
DROP TABLE sandbox_awake;
DROP TABLE usage_counters;
ALTER TABLE projects DROP CONSTRAINT projects_sandbox_monthly_seconds_nonnegative;
ALTER TABLE projects DROP COLUMN sandbox_monthly_seconds;
