-- PostgreSQL only (value compression of large JSON columns); SQLite stores values as they are.
SELECT 1;
