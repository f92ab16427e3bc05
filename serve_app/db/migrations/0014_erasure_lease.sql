-- memserve schema v14 (issue 21 item 2): an erasure holds a lease that expires.
-- A running forget renews lease_until between its chunks and stamps finished_at when it
-- ends (also on failure). An unfinished erasure whose lease ran out (the forget's
-- replica died, its connection was cut) counts as finished at lease_until: the guard
-- keeps voiding work begun before that moment and no longer blocks work begun after it.
-- claim_token: the forget holding the row; a retried forget of the same scope takes a
-- live row over (a new token), and only the holder renews or finishes it.
ALTER TABLE memory_erasures
    ADD COLUMN lease_until timestamptz,
    ADD COLUMN claim_token uuid;
-- Rows written before this migration: finished ones keep their finish; a forget still
-- running under an older replica (rolling upgrade) gets ten minutes before it stops
-- blocking; an interrupted one left behind stops blocking after the same ten minutes.
UPDATE memory_erasures SET lease_until = coalesce(finished_at, now() + interval '10 minutes');
ALTER TABLE memory_erasures
    ALTER COLUMN lease_until SET DEFAULT now() + interval '10 minutes',
    ALTER COLUMN lease_until SET NOT NULL;
