-- Output tails are stored as text: bytes that are not UTF-8, and NUL (which PostgreSQL text
-- cannot hold), are replaced by U+FFFD, and these flags say a tail was altered that way.
ALTER TABLE run_attempts
    ADD COLUMN stdout_replaced boolean NOT NULL DEFAULT false,
    ADD COLUMN stderr_replaced boolean NOT NULL DEFAULT false;
