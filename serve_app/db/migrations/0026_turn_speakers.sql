-- memserve schema v26: who said each turn.
--
-- A group chat or shared thread has several speakers in one session. ``speaker_name`` is
-- the OpenAI-style ``name`` of a message (shown to extraction: who said what);
-- ``speaker_id`` a platform user of the same tenant who said it: what they say about
-- themselves goes to their own memory. A forget of that user deletes the turns they said
-- in other users' sessions too (the partial index finds them).
ALTER TABLE session_turns ADD COLUMN speaker_name text;
ALTER TABLE session_turns ADD COLUMN speaker_id text;
CREATE INDEX session_turns_speaker ON session_turns (tenant_id, speaker_id)
    WHERE speaker_id IS NOT NULL;
