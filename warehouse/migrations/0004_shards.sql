-- 0004: distributed runs: the shard (load host) that played every
-- episode and turn, and how many shards a sweep point ran on. Rows loaded before this
-- migration came from single-process runs: shard 0. And the verdict the writer of
-- sweep_points.jsonl gave each point (engine self-checks, failed or late shards), which
-- the warehouse cannot recompute from the rows (v_sweep_summary ANDs it in).
ALTER TABLE episodes ADD COLUMN IF NOT EXISTS shard INTEGER;      -- k of the shard that played it; 0 in a single-process run
ALTER TABLE turns ADD COLUMN IF NOT EXISTS shard INTEGER;         -- the shard of its episode
ALTER TABLE sweep_points ADD COLUMN IF NOT EXISTS shards INTEGER; -- shards the point ran on; NULL for a single-process point
UPDATE episodes SET shard = 0 WHERE shard IS NULL;
UPDATE turns SET shard = 0 WHERE shard IS NULL;
ALTER TABLE sweep_points ADD COLUMN IF NOT EXISTS valid BOOLEAN;          -- the point's verdict as written; NULL for derived points
ALTER TABLE sweep_points ADD COLUMN IF NOT EXISTS invalid_reason VARCHAR; -- its reasons ("; "-joined), NULL when valid
