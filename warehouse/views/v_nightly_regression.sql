-- v_nightly_regression: the latest run labelled 'nightly' (by created_at) against its
-- baseline: the run pinned in `baselines` for label 'nightly' when there is one
-- (baseline_source = 'pinned'), else the previous 'nightly' run ('previous').
-- One row per statistic from compare_runs (p50/p99 of TTFT and E2E with 95% bootstrap
-- CIs of the difference, 200 resamples, seed 42, verdict regression/improvement/
-- no-change), plus request throughput from samples_summary (one window per run, so no
-- CI; higher is better). Empty when there is no candidate or no baseline.
CREATE OR REPLACE VIEW v_nightly_regression AS
WITH nightly AS (
    SELECT run_id, created_at,
           row_number() OVER (ORDER BY created_at DESC, run_id DESC) AS recency
    FROM runs
    WHERE label = 'nightly'
),
candidate AS (
    SELECT run_id FROM nightly WHERE recency = 1
),
baseline AS (
    SELECT run_id, 'pinned' AS source FROM baselines
    WHERE label = 'nightly' AND run_id IN (SELECT run_id FROM runs)
    UNION ALL
    SELECT run_id, 'previous' FROM nightly
    WHERE recency = 2 AND NOT EXISTS (
        SELECT 1 FROM baselines WHERE label = 'nightly' AND run_id IN (SELECT run_id FROM runs))
),
latency AS (
    SELECT * FROM compare_runs((SELECT run_id FROM baseline), (SELECT run_id FROM candidate))
),
throughput AS (
    SELECT
        b.run_id AS baseline_run_id,
        c.run_id AS candidate_run_id,
        'request_throughput_per_s' AS statistic,
        sb.request_throughput_per_s AS baseline_value,
        sc.request_throughput_per_s AS candidate_value,
        sc.request_throughput_per_s - sb.request_throughput_per_s AS diff,
        NULL::DOUBLE AS diff_ci_low,
        NULL::DOUBLE AS diff_ci_high,
        sb.n_ok AS n_baseline,
        sc.n_ok AS n_candidate,
        NULL::BIGINT AS n_boot,
        NULL::VARCHAR AS verdict
    FROM baseline AS b, candidate AS c, samples_summary AS sb, samples_summary AS sc
    WHERE sb.group_by = 'run' AND sb.run_id = b.run_id
      AND sc.group_by = 'run' AND sc.run_id = c.run_id
)
SELECT 'nightly' AS label, (SELECT source FROM baseline) AS baseline_source, l.*
FROM latency AS l
UNION ALL
SELECT 'nightly', (SELECT source FROM baseline), t.*
FROM throughput AS t;
