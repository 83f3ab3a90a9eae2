DROP TABLE terminal_shares;
