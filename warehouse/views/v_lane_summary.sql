-- v_lane_summary: one row per (run, lane): samples_summary's rows with group_by = 'lane'
-- (benchmaker/engine/sql/summary.sql unchanged), beside the lane's spec from the manifest.
-- Stat columns are structs {count, mean, min, p50, p90, p95, p99, max} (linear percentiles).
CREATE OR REPLACE VIEW v_lane_summary AS
WITH lane_rows AS (
    SELECT * EXCLUDE (group_by) RENAME (group_key AS lane)
    FROM samples_summary
    WHERE group_by = 'lane'
)
SELECT
    l.run_id, l.lane, l.n_requests AS n_requests_all_phases, l.spec AS lane_spec,
    s.* EXCLUDE (run_id, lane)
FROM lanes AS l
LEFT JOIN lane_rows AS s USING (run_id, lane)
ORDER BY l.run_id, l.lane;
