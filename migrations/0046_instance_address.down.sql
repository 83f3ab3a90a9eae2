ALTER TABLE instances DROP COLUMN address;
