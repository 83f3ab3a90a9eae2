DROP TABLE terminals;
