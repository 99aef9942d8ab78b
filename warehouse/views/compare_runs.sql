-- compare_runs(baseline_run, candidate_run, n_boot := 200, seed := 42): table macro.
-- For p50 and p99 of TTFT and E2E (ms, measured phase, ok requests; the definitions of
-- benchmaker/sql/summary.sql: ttft = first_token - sent, e2e = end - sent), one row per
-- statistic: the baseline and candidate values, their difference (candidate - baseline),
-- and a 95% percentile-bootstrap confidence interval of that difference.
--
-- Bootstrap (Efron & Tibshirani 1993, ch. 13, percentile interval): each run's values are
-- numbered in sorted order; resample b (0..n_boot-1) draws n indices
-- hash(seed, b, run_id, metric, j) % n, j = 0..n-1, i.e. with replacement, fixed by
-- `seed` (same result on every query with one DuckDB version; hash() is not promised
-- stable across DuckDB versions). The statistic is taken per resample and run, the
-- candidate's minus the baseline's per b, and the interval is quantile_cont at 2.5% and
-- 97.5% of those n_boot differences. Cost: O(n_boot * n) rows per run.
-- Verdict (latency: higher is worse): 'regression' when the whole interval is above 0,
-- 'improvement' when it is below 0, else 'no-change'.
CREATE OR REPLACE MACRO compare_runs(baseline_run, candidate_run, n_boot := 200, seed := 42) AS TABLE
WITH observations AS (
    SELECT run_id, 'ttft_ms' AS metric, (first_token_ns - sent_ns) / 1e6 AS value_ms
    FROM requests
    WHERE run_id IN (baseline_run, candidate_run) AND phase = 'measure' AND outcome = 'ok'
      AND first_token_ns IS NOT NULL AND sent_ns IS NOT NULL
    UNION ALL
    SELECT run_id, 'e2e_ms', (end_ns - sent_ns) / 1e6
    FROM requests
    WHERE run_id IN (baseline_run, candidate_run) AND phase = 'measure' AND outcome = 'ok'
      AND end_ns IS NOT NULL AND sent_ns IS NOT NULL
),
numbered AS (
    SELECT
        run_id, metric, value_ms,
        row_number() OVER (PARTITION BY run_id, metric ORDER BY value_ms) - 1 AS i
    FROM observations
),
sizes AS (
    SELECT run_id, metric, count(*) AS n,
           quantile_cont(value_ms, 0.5) AS p50, quantile_cont(value_ms, 0.99) AS p99
    FROM observations
    GROUP BY ALL
),
draws AS (
    SELECT run_id, metric, n, b, unnest(range(n)) AS j
    FROM sizes, range(n_boot) AS boot(b)
),
picks AS (
    SELECT run_id, metric, b, (hash(seed, b, run_id, metric, j) % n)::BIGINT AS i
    FROM draws
),
resampled AS (
    SELECT p.run_id, p.metric, p.b,
           quantile_cont(v.value_ms, 0.5) AS p50, quantile_cont(v.value_ms, 0.99) AS p99
    FROM picks AS p
    JOIN numbered AS v USING (run_id, metric, i)
    GROUP BY ALL
),
resampled_long AS (
    SELECT run_id, metric, b, 'p50' AS stat, p50 AS value FROM resampled
    UNION ALL
    SELECT run_id, metric, b, 'p99', p99 FROM resampled
),
point_long AS (
    SELECT run_id, metric, n, 'p50' AS stat, p50 AS value FROM sizes
    UNION ALL
    SELECT run_id, metric, n, 'p99', p99 FROM sizes
),
differences AS (
    SELECT c.metric, c.stat, c.b, c.value - a.value AS diff
    FROM resampled_long AS c
    JOIN resampled_long AS a ON a.metric = c.metric AND a.stat = c.stat AND a.b = c.b
    WHERE c.run_id = candidate_run AND a.run_id = baseline_run
),
intervals AS (
    SELECT metric, stat, count(*) AS n_boot,
           quantile_cont(diff, 0.025) AS ci_low, quantile_cont(diff, 0.975) AS ci_high
    FROM differences
    GROUP BY ALL
)
SELECT
    baseline_run AS baseline_run_id,
    candidate_run AS candidate_run_id,
    pb.stat || '_' || pb.metric AS statistic,
    pb.value AS baseline_value,
    pc.value AS candidate_value,
    pc.value - pb.value AS diff,
    ci.ci_low AS diff_ci_low,
    ci.ci_high AS diff_ci_high,
    pb.n AS n_baseline,
    pc.n AS n_candidate,
    ci.n_boot,
    CASE
        WHEN ci.ci_low > 0 THEN 'regression'
        WHEN ci.ci_high < 0 THEN 'improvement'
        ELSE 'no-change'
    END AS verdict
FROM point_long AS pb
JOIN point_long AS pc ON pc.metric = pb.metric AND pc.stat = pb.stat
JOIN intervals AS ci ON ci.metric = pb.metric AND ci.stat = pb.stat
WHERE pb.run_id = baseline_run AND pc.run_id = candidate_run
ORDER BY pb.metric DESC, pb.stat;
