-- v_vllm_compat: the keys of `vllm bench serve` result JSON (vllm/benchmarks/serve.py,
-- BenchmarkMetrics and the `result` dict: duration, completed, failed, total_input_tokens,
-- total_output_tokens, request_throughput, request_goodput, output_throughput,
-- total_token_throughput, {mean,median,std,p90,p95,p99}_{ttft,tpot,itl,e2el}_ms), one row
-- per run (sweep_point NULL) and per sweep point, so results can be set side by side.
-- Values come from samples_summary (benchmaker/engine/sql/summary.sql): median = p50 (linear);
-- itl = pooled gaps between token-bearing events (as vLLM pools per-chunk gaps);
-- e2el = end - sent over ok requests; tpot is vLLM's own definition, (end - first_token) /
-- (output_tokens - 1) (tpot_vllm_ms of v_tpot_definitions; our summary's tpot_ms differs:
-- docs/stream-rules.md), its percentiles linear over the same requests.
-- The std_* columns are population standard deviations (numpy np.std, as vLLM) over the
-- same measured ok requests. Differences from vLLM: token counts are the server's usage
-- (vLLM counts output tokens with a tokenizer), and duration is the measurement window
-- (first intended send .. last completion) rather than vLLM's wall time of the run.
CREATE OR REPLACE VIEW v_vllm_compat AS
WITH base AS (
    SELECT
        run_id, sweep_point, token_event_ns,
        (first_token_ns - sent_ns) / 1e6 AS ttft_ms,
        (end_ns - sent_ns) / 1e6 AS e2el_ms,
        CASE WHEN output_tokens >= 2 AND first_token_ns IS NOT NULL
             THEN (end_ns - first_token_ns) / 1e6 / (output_tokens - 1) END AS tpot_ms -- = v_tpot_definitions.tpot_vllm_ms
    FROM samples
    WHERE phase = 'measure' AND outcome = 'ok'
),
grouped AS (
    SELECT 'run' AS group_by, run_id AS group_key, * FROM base
    UNION ALL
    SELECT 'sweep_point', sweep_point, * FROM base WHERE sweep_point IS NOT NULL
),
spread AS (
    SELECT run_id, group_by, group_key,
           stddev_pop(ttft_ms) AS std_ttft_ms, stddev_pop(tpot_ms) AS std_tpot_ms,
           avg(tpot_ms) AS mean_tpot_ms, quantile_cont(tpot_ms, 0.5) AS median_tpot_ms,
           quantile_cont(tpot_ms, 0.9) AS p90_tpot_ms, quantile_cont(tpot_ms, 0.95) AS p95_tpot_ms,
           quantile_cont(tpot_ms, 0.99) AS p99_tpot_ms,
           stddev_pop(e2el_ms) AS std_e2el_ms
    FROM grouped
    GROUP BY ALL
),
gaps AS (
    SELECT run_id, group_by, group_key,
           unnest(list_transform(range(1, len(token_event_ns)),
                                 lambda i: (token_event_ns[i + 1] - token_event_ns[i]) / 1e6)) AS itl_ms
    FROM grouped
    WHERE len(token_event_ns) >= 2
),
gap_spread AS (
    SELECT run_id, group_by, group_key, stddev_pop(itl_ms) AS std_itl_ms
    FROM gaps
    GROUP BY ALL
)
SELECT
    s.run_id,
    CASE WHEN s.group_by = 'sweep_point' THEN s.group_key END AS sweep_point,
    s.window_s AS duration,
    s.n_ok AS completed,
    s.n_sent - s.n_ok AS failed,
    s.prompt_tokens_total AS total_input_tokens,
    s.output_tokens_total AS total_output_tokens,
    s.request_throughput_per_s AS request_throughput,
    s.goodput_per_s AS request_goodput,
    s.output_throughput_tok_per_s AS output_throughput,
    (s.prompt_tokens_total + s.output_tokens_total) / nullif(s.window_s, 0) AS total_token_throughput,
    s.ttft_ms.mean AS mean_ttft_ms, s.ttft_ms.p50 AS median_ttft_ms, d.std_ttft_ms,
    s.ttft_ms.p90 AS p90_ttft_ms, s.ttft_ms.p95 AS p95_ttft_ms, s.ttft_ms.p99 AS p99_ttft_ms,
    d.mean_tpot_ms, d.median_tpot_ms, d.std_tpot_ms, d.p90_tpot_ms, d.p95_tpot_ms, d.p99_tpot_ms,
    s.itl_event_ms.mean AS mean_itl_ms, s.itl_event_ms.p50 AS median_itl_ms, g.std_itl_ms,
    s.itl_event_ms.p90 AS p90_itl_ms, s.itl_event_ms.p95 AS p95_itl_ms,
    s.itl_event_ms.p99 AS p99_itl_ms,
    s.e2e_ms.mean AS mean_e2el_ms, s.e2e_ms.p50 AS median_e2el_ms, d.std_e2el_ms,
    s.e2e_ms.p90 AS p90_e2el_ms, s.e2e_ms.p95 AS p95_e2el_ms, s.e2e_ms.p99 AS p99_e2el_ms
FROM samples_summary AS s
LEFT JOIN spread AS d USING (run_id, group_by, group_key)
LEFT JOIN gap_spread AS g USING (run_id, group_by, group_key)
WHERE s.group_by IN ('run', 'sweep_point')
ORDER BY s.run_id, s.group_by, s.group_key;
