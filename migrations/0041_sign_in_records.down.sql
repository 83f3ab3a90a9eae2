DROP TABLE sign_in_records;
