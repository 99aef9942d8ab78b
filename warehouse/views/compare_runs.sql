-- compare_runs(baseline_run, candidate_run, n_boot := 200, seed := 42): table macro.
-- compare_points (warehouse/views/compare_points.sql, where the statistics, the
-- bootstrap and the verdict are defined) with the whole run as one sample: one row per
-- statistic (p50/p99 of TTFT and E2E), every sweep point pooled. Read by
-- v_nightly_regression; `benchmaker compare` reads compare_points per point.
CREATE OR REPLACE MACRO compare_runs(baseline_run, candidate_run, n_boot := 200, seed := 42) AS TABLE
SELECT * EXCLUDE (point_key, point_order, baseline_sweep_point, candidate_sweep_point)
FROM compare_points(baseline_run, candidate_run, n_boot := n_boot, seed := seed, per_point := false);
