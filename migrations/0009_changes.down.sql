DROP TABLE evidence;
DROP TABLE change_sets;
DROP TABLE changes;
DROP FUNCTION changes_guard();
ALTER TABLE projects DROP COLUMN check_command;
