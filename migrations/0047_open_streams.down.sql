DROP TABLE open_streams;
