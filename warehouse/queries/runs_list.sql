-- runs_list: what `benchmaker runs` prints. One row per run, and for a sweep run
-- (swebench-replay, llm-sweep: rows in sweep_points) one row per sweep point instead:
-- a sweep's points ran one after the other (and an engine point's clock starts at its
-- own zero), so run-level throughput and concurrency over all of its requests would add
-- the points together; each point's figures are v_sweep_summary's.
-- valid / invalid_reason: a point's verdict (v_sweep_summary), a single run's
-- summary.json verdict (runs.summary, reasons '; '-joined).
-- Parameters: $label (NULL: every label), $limit (at most this many runs, newest first).
-- Latencies in ms (linear percentiles), throughput in requests/s over the run's or the
-- point's own window.
WITH chosen AS (
    SELECT run_id, kind, label, created_at, summary, partial
    FROM runs
    WHERE $label IS NULL OR label = $label
    ORDER BY created_at DESC NULLS LAST, run_id
    LIMIT $limit
),
single AS (
    SELECT
        c.run_id, NULL::VARCHAR AS sweep_point, c.kind, c.label, c.created_at,
        CAST(c.summary -> '$.verdict.valid' AS BOOLEAN) AS valid,
        nullif(array_to_string(CAST(c.summary -> '$.verdict.reasons' AS VARCHAR[]), '; '), '') AS invalid_reason,
        v.n_samples, v.n_ok,
        round(v.request_throughput_per_s, 3) AS request_throughput_per_s,
        round(v.ttft_ms.p50, 3) AS p50_ttft_ms, round(v.ttft_ms.p99, 3) AS p99_ttft_ms,
        round(v.e2e_ms.p50, 3) AS p50_e2e_ms, round(v.e2e_ms.p99, 3) AS p99_e2e_ms,
        c.partial,
        0 AS point_order, NULL::DOUBLE AS target_concurrency, NULL::DOUBLE AS target_rate_per_s
    FROM chosen AS c
    LEFT JOIN v_run_summary AS v USING (run_id)
    WHERE NOT EXISTS (SELECT 1 FROM sweep_points AS p WHERE p.run_id = c.run_id)
),
points AS (
    SELECT
        c.run_id, s.sweep_point, c.kind, c.label, c.created_at,
        s.valid, s.invalid_reason,
        s.n_requests AS n_samples, s.n_ok,
        round(s.request_throughput_per_s, 3) AS request_throughput_per_s,
        round(s.p50_ttft_ms, 3) AS p50_ttft_ms, round(s.p99_ttft_ms, 3) AS p99_ttft_ms,
        round(s.p50_e2e_ms, 3) AS p50_e2e_ms, round(s.p99_e2e_ms, 3) AS p99_e2e_ms,
        c.partial,
        1 AS point_order, s.target_concurrency, s.target_rate_per_s
    FROM chosen AS c
    JOIN v_sweep_summary AS s USING (run_id)
)
SELECT * EXCLUDE (point_order, target_concurrency, target_rate_per_s)
FROM (SELECT * FROM single UNION ALL BY NAME SELECT * FROM points)
ORDER BY created_at DESC NULLS LAST, run_id, point_order, target_concurrency NULLS LAST,
         target_rate_per_s NULLS LAST, sweep_point;
