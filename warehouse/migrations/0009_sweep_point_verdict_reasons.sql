-- 0009: the reasons the writer of sweep_points.jsonl found a point invalid that the rows
-- cannot show (engine self-checks, failed or late shards), kept apart from the verdict
-- itself: v_sweep_summary (benchmaker/sweep/sql/sweep_summary.sql) decides `valid` from the rows
-- and appends these, as point_summary.json does, so the two never disagree. Rows loaded
-- before: their written verdict's reasons stand in (they may repeat a reason the view
-- finds itself).
ALTER TABLE sweep_points ADD COLUMN IF NOT EXISTS verdict_reasons VARCHAR; -- '; '-joined, NULL when none
UPDATE sweep_points SET verdict_reasons = invalid_reason
WHERE valid = false AND verdict_reasons IS NULL;
