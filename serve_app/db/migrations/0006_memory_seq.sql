-- memserve schema v6: a write-order sequence for memories. The hot cache keeps a
-- user's memories in the order they were written (neighbour smoothing in hybrid
-- search treats consecutive memories as context of each other); created_at cannot
-- order the rows of one batch (they share now()) and ids are random.
ALTER TABLE memory_items ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
