DROP TABLE code_session_commands;
DROP TABLE code_session_files;
DROP TABLE code_sessions;
DROP TABLE events;
