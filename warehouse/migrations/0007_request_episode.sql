-- 0007: the agent episode and turn of a request. Every model call of
-- a replayed episode is a request: an engine Sample in the point's samples.jsonl whose
-- meta names its episode and turn. These two columns make the join to `episodes` and
-- `turns` plain SQL, e.g. the TTFT of each turn of each recorded trajectory:
--   SELECT e.trajectory_id, r.turn_index, (r.first_token_ns - r.sent_ns) / 1e6 AS ttft_ms
--   FROM requests r JOIN episodes e USING (run_id, sweep_point, episode_id)
-- NULL for a request that is no model call of an episode (engine runs). Rows loaded
-- before: from their stored meta.
ALTER TABLE requests ADD COLUMN IF NOT EXISTS episode_id VARCHAR;  -- meta.episode_id
ALTER TABLE requests ADD COLUMN IF NOT EXISTS turn_index INTEGER;  -- meta.turn_index, 0 = the episode's first call
UPDATE requests SET
    episode_id = meta ->> 'episode_id',
    turn_index = TRY_CAST(meta ->> 'turn_index' AS INTEGER)
WHERE episode_id IS NULL AND meta IS NOT NULL;
