DROP INDEX terminals_live_by_user;
