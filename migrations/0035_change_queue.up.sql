-- The Change verifier's queue lives in the changes' rows, so that any
-- instance on the database may take a check, exactly one runs it, and a
-- check whose instance stopped is taken again once its claim expires.
--
-- check_due: when the next attempt at the Change's check may begin; NULL
-- when nothing is to be verified (finished, or waiting for a person).
-- check_attempts: the attempts since the Change was queued.
-- claimed_by / claimed_until: the instance running the check, and until
-- when its claim holds unless renewed; an expired claim is anyone's.
ALTER TABLE changes
    ADD COLUMN check_due      timestamptz DEFAULT now(),
    ADD COLUMN check_attempts integer     NOT NULL DEFAULT 0,
    ADD COLUMN claimed_by     text,
    ADD COLUMN claimed_until  timestamptz;

-- What a previous run left to verify, as the start used to queue it.
UPDATE changes SET check_due = NULL
    WHERE NOT (status = 'verifying' OR (status = 'composed' AND wait_reason IS NULL));

ALTER TABLE changes
    ADD CONSTRAINT changes_claim_complete CHECK ((claimed_by IS NULL) = (claimed_until IS NULL)),
    ADD CONSTRAINT changes_claim_queued CHECK (claimed_by IS NULL OR check_due IS NOT NULL),
    ADD CONSTRAINT changes_claimed_by_length CHECK (char_length(claimed_by) BETWEEN 1 AND 64),
    ADD CONSTRAINT changes_queued_unfinished CHECK (check_due IS NULL OR status IN ('composed', 'verifying')),
    ADD CONSTRAINT changes_check_attempts_counted CHECK (check_attempts >= 0);

-- The verifiers' poll: the oldest due check first.
CREATE INDEX changes_check_due ON changes (check_due, id) WHERE check_due IS NOT NULL;
