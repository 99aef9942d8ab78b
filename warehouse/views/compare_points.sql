-- compare_points(baseline_run, candidate_run, n_boot := 200, seed := 42, per_point := true):
-- table macro. For p50 and p99 of TTFT and E2E (ms, measured phase, ok requests; the
-- definitions of benchmaker/engine/sql/summary.sql: ttft = first_token - sent, e2e = end - sent),
-- one row per matched sweep point and statistic: the baseline and candidate values, their
-- difference (candidate - baseline), and a 95% percentile-bootstrap confidence interval
-- of that difference. With per_point := false the whole run is one sample (point 'run'):
-- compare_runs and v_nightly_regression read it that way.
--
-- Matching: the points of the two runs are matched by their target, not their label
-- (compare_key: 'concurrency=N', else 'rate=R/s', else the label); point_order sorts
-- them by number (N or R; a label sorts last). Points present in one run only have no
-- row here (benchmaker.warehouse.compare names them).
--
-- Bootstrap (Efron & Tibshirani 1993, ch. 13, percentile interval): each run's values of
-- a point are numbered in sorted order; resample b (0..n_boot-1) draws n indices
-- hash(seed, b, run_id, point_key, metric, j) % n, j = 0..n-1, i.e. with replacement,
-- fixed by `seed` (same result on every query with one DuckDB version; hash() is not
-- promised stable across DuckDB versions). The statistic is taken per resample, run and
-- point, the candidate's minus the baseline's per b, and the interval is quantile_cont at
-- 2.5% and 97.5% of those n_boot differences. Cost: O(n_boot * n) rows per run and point.
-- Verdict (latency: higher is worse): 'regression' when the whole interval is above 0,
-- 'improvement' when it is below 0, else 'no-change'.
CREATE OR REPLACE MACRO compare_points(baseline_run, candidate_run, n_boot := 200, seed := 42, per_point := true)
AS TABLE
WITH point_keys AS (
    SELECT
        run_id, sweep_point,
        compare_key(concurrency, rate_per_s, sweep_point) AS point_key,
        coalesce(concurrency::DOUBLE, rate_per_s) AS point_order
    FROM sweep_points
    WHERE run_id IN (baseline_run, candidate_run)
),
measured AS (
    SELECT
        r.run_id,
        CASE WHEN per_point THEN coalesce(k.point_key, r.sweep_point, 'run') ELSE 'run' END AS point_key,
        CASE WHEN per_point THEN k.point_order END AS point_order,
        CASE WHEN per_point THEN r.sweep_point END AS sweep_point,
        r.first_token_ns, r.sent_ns, r.end_ns
    FROM requests AS r
    LEFT JOIN point_keys AS k ON k.run_id = r.run_id AND k.sweep_point IS NOT DISTINCT FROM r.sweep_point
    WHERE r.run_id IN (baseline_run, candidate_run) AND r.phase = 'measure' AND r.outcome = 'ok'
),
labels AS (
    SELECT run_id, point_key, any_value(point_order) AS point_order,
           string_agg(DISTINCT sweep_point, ',' ORDER BY sweep_point) AS sweep_point
    FROM measured
    GROUP BY ALL
),
observations AS (
    SELECT run_id, point_key, 'ttft_ms' AS metric, (first_token_ns - sent_ns) / 1e6 AS value_ms
    FROM measured
    WHERE first_token_ns IS NOT NULL AND sent_ns IS NOT NULL
    UNION ALL
    SELECT run_id, point_key, 'e2e_ms', (end_ns - sent_ns) / 1e6
    FROM measured
    WHERE end_ns IS NOT NULL AND sent_ns IS NOT NULL
),
numbered AS (
    SELECT
        run_id, point_key, metric, value_ms,
        row_number() OVER (PARTITION BY run_id, point_key, metric ORDER BY value_ms) - 1 AS i
    FROM observations
),
sizes AS (
    SELECT run_id, point_key, metric, count(*) AS n,
           quantile_cont(value_ms, 0.5) AS p50, quantile_cont(value_ms, 0.99) AS p99
    FROM observations
    GROUP BY ALL
),
draws AS (
    SELECT run_id, point_key, metric, n, b, unnest(range(n)) AS j
    FROM sizes, range(n_boot) AS boot(b)
),
picks AS (
    SELECT run_id, point_key, metric, b,
           (hash(seed, b, run_id, CASE WHEN per_point THEN point_key END, metric, j) % n)::BIGINT AS i
    FROM draws
),
resampled AS (
    SELECT p.run_id, p.point_key, p.metric, p.b,
           quantile_cont(v.value_ms, 0.5) AS p50, quantile_cont(v.value_ms, 0.99) AS p99
    FROM picks AS p
    JOIN numbered AS v USING (run_id, point_key, metric, i)
    GROUP BY ALL
),
resampled_long AS (
    SELECT run_id, point_key, metric, b, 'p50' AS stat, p50 AS value FROM resampled
    UNION ALL
    SELECT run_id, point_key, metric, b, 'p99', p99 FROM resampled
),
point_long AS (
    SELECT run_id, point_key, metric, n, 'p50' AS stat, p50 AS value FROM sizes
    UNION ALL
    SELECT run_id, point_key, metric, n, 'p99', p99 FROM sizes
),
differences AS (
    SELECT c.point_key, c.metric, c.stat, c.b, c.value - a.value AS diff
    FROM resampled_long AS c
    JOIN resampled_long AS a ON a.point_key = c.point_key AND a.metric = c.metric AND a.stat = c.stat AND a.b = c.b
    WHERE c.run_id = candidate_run AND a.run_id = baseline_run
),
intervals AS (
    SELECT point_key, metric, stat, count(*) AS n_boot,
           quantile_cont(diff, 0.025) AS ci_low, quantile_cont(diff, 0.975) AS ci_high
    FROM differences
    GROUP BY ALL
)
SELECT
    baseline_run AS baseline_run_id,
    candidate_run AS candidate_run_id,
    pb.point_key,
    lb.point_order,
    lb.sweep_point AS baseline_sweep_point,
    lc.sweep_point AS candidate_sweep_point,
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
JOIN point_long AS pc ON pc.point_key = pb.point_key AND pc.metric = pb.metric AND pc.stat = pb.stat
JOIN intervals AS ci ON ci.point_key = pb.point_key AND ci.metric = pb.metric AND ci.stat = pb.stat
JOIN labels AS lb ON lb.run_id = baseline_run AND lb.point_key = pb.point_key
JOIN labels AS lc ON lc.run_id = candidate_run AND lc.point_key = pb.point_key
WHERE pb.run_id = baseline_run AND pc.run_id = candidate_run
ORDER BY lb.point_order NULLS LAST, pb.point_key, pb.metric DESC, pb.stat;
