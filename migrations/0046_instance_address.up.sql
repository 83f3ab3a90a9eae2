-- Where other instances reach an instance to hand it a request about a
-- session whose runtime it holds (ATELIER_INTERNAL_URL); NULL when it
-- takes none.
ALTER TABLE instances ADD COLUMN address text;
ALTER TABLE instances ADD CONSTRAINT instances_address_form
    CHECK (address ~ '^https?://[^/?#@[:space:]]+$' AND length(address) <= 2048);
