-- The queue goes back to the verifier's memory; a start queues what is
-- left verifying.
DROP INDEX changes_check_due;
ALTER TABLE changes
    DROP CONSTRAINT changes_check_attempts_counted,
    DROP CONSTRAINT changes_queued_unfinished,
    DROP CONSTRAINT changes_claimed_by_length,
    DROP CONSTRAINT changes_claim_queued,
    DROP CONSTRAINT changes_claim_complete,
    DROP COLUMN claimed_until,
    DROP COLUMN claimed_by,
    DROP COLUMN check_attempts,
    DROP COLUMN check_due;
