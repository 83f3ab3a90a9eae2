ALTER TABLE code_session_files DROP COLUMN content_sha256;
