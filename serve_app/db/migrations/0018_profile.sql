-- Issue 29: the user profile that is always in a context block, kept at write time.
-- profile_class: the class a memory was given when written (by the LLM in extraction,
-- else by serve_app.profile.classify): a standing instruction, a constraint (allergy,
-- diet, health, accessibility, budget) or identity (name, location, family, work);
-- NULL: not profile material. pinned: the owner's override (true: always in the
-- profile, false: never; NULL: the class decides). A forget, supersede, archive or
-- expiry changes the row itself, so every replica's next read of the profile (one
-- indexed query per context) already follows it.
ALTER TABLE memory_items
    ADD COLUMN profile_class text
        CHECK (profile_class IS NULL OR profile_class IN ('instruction', 'constraint', 'identity')),
    ADD COLUMN pinned boolean;

CREATE INDEX memory_items_profile_idx ON memory_items (tenant_id, owner)
    WHERE status = 'active' AND (pinned OR (profile_class IS NOT NULL AND pinned IS NOT FALSE));
