-- 0003: the concurrency proof and usage coverage of a sweep point,
-- as written by benchmaker.sweep.sweep.summarize_point into sweep_points.jsonl. NULL for points
-- without episodes (engine sweeps) and for points derived from samples/episodes only.
ALTER TABLE sweep_points ADD COLUMN IF NOT EXISTS max_in_flight INTEGER;                      -- most episodes in flight at once
ALTER TABLE sweep_points ADD COLUMN IF NOT EXISTS all_started_before_first_finish BOOLEAN;    -- min(C, episodes) started before the first ended
ALTER TABLE sweep_points ADD COLUMN IF NOT EXISTS proof_ok BOOLEAN;                           -- both of the above held
ALTER TABLE sweep_points ADD COLUMN IF NOT EXISTS proof_reason VARCHAR;                       -- why not, NULL when it passed
ALTER TABLE sweep_points ADD COLUMN IF NOT EXISTS n_episodes_usage_complete INTEGER;          -- episodes with usage on every model call
ALTER TABLE sweep_points ADD COLUMN IF NOT EXISTS usage_coverage DOUBLE;                      -- n_episodes_usage_complete / episodes
