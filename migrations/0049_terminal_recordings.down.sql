DROP TABLE terminal_recordings;
DROP FUNCTION terminal_recordings_doom_object();
