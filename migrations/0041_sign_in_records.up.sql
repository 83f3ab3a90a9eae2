-- Failed sign-ins, per account and client address, per address and per
-- account, shared by every instance of the database. A record lives while
-- it holds something back or was failed on within the hour; instances
-- delete the others.
CREATE TABLE sign_in_records (
    scope         text        NOT NULL,
    key           text        NOT NULL,
    failures      integer     NOT NULL DEFAULT 0,
    last_failure  timestamptz NOT NULL,
    next_try      timestamptz NOT NULL,
    -- Attempts being checked now; they stop counting at pending_until, so
    -- an instance that died while checking holds nothing back for long.
    pending       integer     NOT NULL DEFAULT 0,
    pending_until timestamptz NOT NULL,
    PRIMARY KEY (scope, key),
    CONSTRAINT sign_in_records_scope_known CHECK (scope IN ('pair', 'address', 'account')),
    CONSTRAINT sign_in_records_counts CHECK (failures >= 0 AND pending >= 0)
);
