-- memserve schema v11: consolidation holds a lease on the owner instead of a
-- transaction-scoped advisory lock, so no connection or transaction stays open across
-- its LLM calls. A run claims (claimed_until, claim_token) with one conditional upsert;
-- every write renews the lease in its own short transaction and only while the token is
-- still the run's, so a replica whose lease ran out (and was taken over) writes nothing.
ALTER TABLE consolidation_state
    ADD COLUMN claimed_until timestamptz,
    ADD COLUMN claim_token   uuid;
