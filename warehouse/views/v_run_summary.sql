-- v_run_summary: one row per run. The summary columns are samples_summary's rows with
-- group_by = 'run', i.e. benchmaker/engine/sql/summary.sql unchanged (same numbers as the
-- bundle's summary.json "run" object); stat columns are structs
-- {count, mean, min, p50, p90, p95, p99, max} in the unit of their name (linear
-- percentiles, quantile_cont). Run facts from the manifest come first.
CREATE OR REPLACE VIEW v_run_summary AS
WITH run_rows AS (
    SELECT * EXCLUDE (group_by, group_key)
    FROM samples_summary
    WHERE group_by = 'run'
)
SELECT
    r.run_id, r.kind, r.label, r.created_at, r.workers, r.git_sha,
    s.* EXCLUDE (run_id)
FROM runs AS r
LEFT JOIN run_rows AS s USING (run_id)
ORDER BY r.created_at, r.run_id;
