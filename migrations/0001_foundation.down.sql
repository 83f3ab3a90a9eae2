DROP TABLE project_members;
DROP TABLE projects;
DROP TABLE login_sessions;
DROP TABLE users;
