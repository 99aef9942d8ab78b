-- v_run_summary: one row per run. The summary columns are samples_summary's rows with
-- group_by = 'run', i.e. benchmaker/engine/sql/summary.sql unchanged (same numbers as the
-- bundle's summary.json "run" object); stat columns are structs
-- {count, mean, min, p50, p90, p95, p99, max} in the unit of their name (linear
-- percentiles, quantile_cont). Run facts from the manifest come first.
--
-- A sweep run (n_sweep_points > 1: swebench-replay, llm-sweep) ran its points one after
-- the other, and an engine point's clock starts at its own zero: a window over all of
-- its requests would add the points together (three points at 5.6, 42.9 and 170.5 req/s
-- gave 218 req/s; max concurrency 1 + 8 + 32 = 41). Its time-based figures (window_s,
-- throughputs, rates, concurrency) are therefore NULL here: they are per point, in
-- v_sweep_summary. Its counts and latency statistics stay, pooled over every point's
-- requests.
CREATE OR REPLACE VIEW v_run_summary AS
WITH run_rows AS (
    SELECT * EXCLUDE (group_by, group_key)
    FROM samples_summary
    WHERE group_by = 'run'
),
points AS (
    SELECT run_id, count(*) AS n_sweep_points
    FROM sweep_points
    GROUP BY run_id
)
SELECT
    r.run_id, r.kind, r.label, r.created_at, r.workers, r.git_sha,
    coalesce(p.n_sweep_points, 0) AS n_sweep_points,
    s.* EXCLUDE (run_id) REPLACE (
        CASE WHEN p.n_sweep_points > 1 THEN NULL ELSE s.window_s END AS window_s,
        CASE WHEN p.n_sweep_points > 1 THEN NULL ELSE s.request_throughput_per_s END AS request_throughput_per_s,
        CASE WHEN p.n_sweep_points > 1 THEN NULL ELSE s.offered_rate_per_s END AS offered_rate_per_s,
        CASE WHEN p.n_sweep_points > 1 THEN NULL ELSE s.achieved_send_rate_per_s END AS achieved_send_rate_per_s,
        CASE WHEN p.n_sweep_points > 1 THEN NULL ELSE s.output_throughput_tok_per_s END
            AS output_throughput_tok_per_s,
        CASE WHEN p.n_sweep_points > 1 THEN NULL ELSE s.goodput_per_s END AS goodput_per_s,
        CASE WHEN p.n_sweep_points > 1 THEN NULL ELSE s.max_concurrency END AS max_concurrency,
        CASE WHEN p.n_sweep_points > 1 THEN NULL ELSE s.mean_concurrency END AS mean_concurrency,
        CASE WHEN p.n_sweep_points > 1 THEN NULL ELSE s.correct_throughput_per_s END AS correct_throughput_per_s,
        CASE WHEN p.n_sweep_points > 1 THEN NULL ELSE s.goodput_correct_per_s END AS goodput_correct_per_s
    )
FROM runs AS r
LEFT JOIN run_rows AS s USING (run_id)
LEFT JOIN points AS p USING (run_id)
ORDER BY r.created_at, r.run_id;
