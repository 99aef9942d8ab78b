-- Summary of runs: one row per (run_id, group_by, group_key), computed over a relation
-- named `samples` with the columns of benchmaker.engine.records.SAMPLE_COLUMNS and a relation
-- `run_slo` (run_id, ttft_ms, tpot_ms, e2e_ms: the run's declared SLO bounds in ms, NULL
-- where not declared; no row for a run without an SLO).
-- The run bundle's summary.json, the warehouse's v_run_summary and the report all read
-- this one file (docs/metrics.md). Definitions:
--   group_by      'run' (all samples), 'lane', 'stage', 'sweep_point'
--   window_s      first intended send .. last completion of the measured samples (s)
--   ttft_ms       first_token - sent, successes that produced a token
--   ttfc_ms       first_content - sent
--   e2e_ms        end - sent over successes; e2e_all_ms over every sent attempt;
--                 e2e_intended_ms = end - intended over successes (coordinated omission)
--   tpot_ms       (last token event - first token event) / (visible output tokens - tokens
--                 of the first event), over samples with >= 2 token events and a divisor
--                 >= 1: visible output tokens = output_tokens - hidden_reasoning_tokens
--                 (usage reasoning tokens the stream did not show); the first event's
--                 tokens are token_event_tokens[1] where the protocol states them, else 1
--                 (counted in n_tpot_first_event_assumed). Null where usage_invalid_reason
--                 is set. E2E still ends at the end of the body; vLLM's and aiperf's TPOT
--                 are in warehouse/views/v_tpot_definitions.sql (docs/stream-rules.md)
--   itl_req_mean_ms  per request: (last event - first event) / (events - 1)
--   itl_event_ms  pooled gaps between successive token-bearing events
--   itl_token_ms  each gap divided by its request's mean tokens per event
--                 (visible output tokens / n_token_events); needs server usage that can
--                 be true
--   schedule_lag_ms  sent - intended
--   slo_met       judged here for every sample of a run with an SLO: a success whose
--                 TTFT, TPOT and E2E are each <= its declared bound (a bound on a metric
--                 the request lacks, e.g. TPOT of a one-token answer, is not held against
--                 it); a failure never meets it. A run without an SLO keeps the samples'
--                 own slo_met (NULL unless a writer judged it).
--   goodput_per_s requests that met the SLO / window (null without an SLO)
--   n_aborted     responses whose last finish reason says the server gave up (class
--                 abort, error, cancelled; finish_class); not ok, so out of every latency
--                 and throughput figure over successes
--   n_recorded_error  replayed calls that failed in the original run, served as
--                 recorded (outcome recorded_error, benchmaker/engine/records.py): not errors of
--                 the system under test, so out of error_rate's numerator and
--                 denominator, and (not ok) out of every figure over successes
--   error_rate    1 - n_ok / (n_sent - n_recorded_error)
--   n_refusal     successes whose output was a refusal (ok, flagged `refusal`)
--   n_length, n_content_filter  successes that ended by the token limit / a content filter
--   n_finish_unknown  successes that ended with a finish reason the product does not know
--                 (finish_class 'unknown': completed, kept as sent)
--   n_usage_invalid  successes whose server token counts cannot be true
--                 (usage_invalid_reason: completion > max_tokens, prompt + completion !=
--                 total, counts summed cumulatively); the token totals are then null
--                 with token_totals_null_reason
--   hidden_reasoning_tokens_total  reasoning tokens of the successes that their streams
--                 did not show (null unless every success with usage stated its reasoning)
--   n_tpot_first_event_assumed  successes whose TPOT counted the first token event as one
--                 token because the protocol does not state per-event counts
--   prefix_cache_hit_rate  cached prompt tokens / prompt tokens over the successes, both
--                 from server usage (`usage.prompt_tokens_details.cached_tokens`, SGLang
--                 `cached_tokens`); null unless every success reported both (unknown is
--                 never 0)
--   n_graded      samples a grader judged (grade 'correct' or 'wrong'; workloads/graders.py)
--   accuracy      n_correct / n_graded (null when nothing was graded)
--   correct_throughput_per_s  correct answers / window (null when nothing was graded)
--   goodput_correct_per_s     correct answers that met every SLO / window (null when
--                 nothing was graded or no SLO was declared)
-- Percentiles are linear interpolation (quantile_cont); every stat carries its count.
-- Times in samples are integer ns; every metric here is in ms or s as named.
WITH measured AS (
    SELECT
        *,
        CASE WHEN usage_invalid_reason IS NULL AND len(token_event_ns) >= 2
                  AND output_tokens - coalesce(hidden_reasoning_tokens, 0) - coalesce(token_event_tokens[1], 1) >= 1
             THEN (token_event_ns[len(token_event_ns)] - token_event_ns[1]) / 1e6
                  / (output_tokens - coalesce(hidden_reasoning_tokens, 0) - coalesce(token_event_tokens[1], 1))
        END AS tpot_ms,
        CASE WHEN usage_invalid_reason IS NULL THEN output_tokens - coalesce(hidden_reasoning_tokens, 0) END
            AS visible_output_tokens
    FROM samples
),
judged AS (
    SELECT
        s.* REPLACE (
            CASE WHEN o.ttft_ms IS NOT NULL OR o.tpot_ms IS NOT NULL OR o.e2e_ms IS NOT NULL
                 THEN s.outcome = 'ok'
                      AND coalesce((s.first_token_ns - s.sent_ns) / 1e6 <= o.ttft_ms, true)
                      AND coalesce(s.tpot_ms <= o.tpot_ms, true)
                      AND coalesce((s.end_ns - s.sent_ns) / 1e6 <= o.e2e_ms, true)
                 ELSE s.slo_met END AS slo_met)
    FROM measured AS s
    LEFT JOIN run_slo AS o ON o.run_id = s.run_id
),
base AS (
    SELECT
        *,
        outcome = 'ok' AS is_ok,
        sent_ns IS NOT NULL AS is_sent,
        (first_token_ns - sent_ns) / 1e6 AS ttft_ms,
        (first_content_ns - sent_ns) / 1e6 AS ttfc_ms,
        (end_ns - sent_ns) / 1e6 AS e2e_ms,
        (end_ns - intended_ns) / 1e6 AS e2e_intended_ms,
        (sent_ns - intended_ns) / 1e6 AS schedule_lag_ms,
        CASE WHEN n_token_events >= 2
             THEN (token_event_ns[len(token_event_ns)] - token_event_ns[1]) / 1e6
                  / (len(token_event_ns) - 1) END AS itl_req_mean_ms,
        CASE WHEN n_token_events > 0 THEN visible_output_tokens / n_token_events END AS tokens_per_event
    FROM judged
    WHERE phase = 'measure'
),
grouped AS (
    SELECT 'run' AS group_by, run_id AS group_key, * FROM base
    UNION ALL
    SELECT 'lane', lane, * FROM base
    UNION ALL
    SELECT 'stage', stage, * FROM base WHERE stage IS NOT NULL
    UNION ALL
    SELECT 'sweep_point', sweep_point, * FROM base WHERE sweep_point IS NOT NULL
),
gaps AS (
    SELECT
        run_id, group_by, group_key, tokens_per_event,
        unnest(list_transform(range(1, len(token_event_ns)),
                              lambda i: (token_event_ns[i + 1] - token_event_ns[i]) / 1e6)) AS itl_event_ms
    FROM grouped
    WHERE is_ok AND len(token_event_ns) >= 2
),
gap_stats AS (
    SELECT
        run_id, group_by, group_key,
        struct_pack(count := count(itl_event_ms), mean := avg(itl_event_ms), min := min(itl_event_ms),
                    p50 := quantile_cont(itl_event_ms, 0.5), p90 := quantile_cont(itl_event_ms, 0.9),
                    p95 := quantile_cont(itl_event_ms, 0.95), p99 := quantile_cont(itl_event_ms, 0.99),
                    max := max(itl_event_ms)) AS itl_event_ms,
        struct_pack(count := count(itl_event_ms / tokens_per_event),
                    mean := avg(itl_event_ms / tokens_per_event), min := min(itl_event_ms / tokens_per_event),
                    p50 := quantile_cont(itl_event_ms / tokens_per_event, 0.5),
                    p90 := quantile_cont(itl_event_ms / tokens_per_event, 0.9),
                    p95 := quantile_cont(itl_event_ms / tokens_per_event, 0.95),
                    p99 := quantile_cont(itl_event_ms / tokens_per_event, 0.99),
                    max := max(itl_event_ms / tokens_per_event)) AS itl_token_ms
    FROM gaps
    GROUP BY ALL
),
inflight_edges AS (
    SELECT run_id, group_by, group_key, sent_ns AS t_ns, 1 AS delta
    FROM grouped WHERE is_sent AND end_ns IS NOT NULL
    UNION ALL
    SELECT run_id, group_by, group_key, end_ns, -1
    FROM grouped WHERE is_sent AND end_ns IS NOT NULL
),
inflight_steps AS (
    SELECT
        run_id, group_by, group_key, t_ns,
        sum(delta) OVER w AS in_flight,
        lead(t_ns) OVER w - t_ns AS held_ns
    FROM inflight_edges
    WINDOW w AS (PARTITION BY run_id, group_by, group_key ORDER BY t_ns, delta
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
concurrency AS (
    SELECT
        run_id, group_by, group_key,
        max(in_flight) AS max_concurrency,
        sum(in_flight * held_ns) / nullif(sum(held_ns), 0) AS mean_concurrency
    FROM inflight_steps
    GROUP BY ALL
),
stats AS (
    SELECT
        run_id, group_by, group_key,
        count(*) AS n_samples,
        count(*) FILTER (is_sent) AS n_sent,
        count(*) FILTER (is_ok) AS n_ok,
        count(*) FILTER (outcome = 'http_error') AS n_http_error,
        count(*) FILTER (outcome = 'transport_error') AS n_transport_error,
        count(*) FILTER (outcome = 'timeout') AS n_timeout,
        count(*) FILTER (outcome = 'protocol_error') AS n_protocol_error,
        count(*) FILTER (outcome = 'empty_output') AS n_empty_output,
        count(*) FILTER (outcome = 'graded_wrong') AS n_graded_wrong,
        count(*) FILTER (outcome = 'grading_error') AS n_grading_error,
        count(*) FILTER (outcome = 'cancelled') AS n_cancelled,
        count(*) FILTER (outcome = 'dropped') AS n_dropped,
        count(*) FILTER (outcome = 'aborted') AS n_aborted,
        count(*) FILTER (outcome = 'recorded_error') AS n_recorded_error,
        count(*) FILTER (is_ok AND refusal) AS n_refusal,
        count(*) FILTER (is_ok AND finish_class = 'length') AS n_length,
        count(*) FILTER (is_ok AND finish_class = 'content_filter') AS n_content_filter,
        count(*) FILTER (is_ok AND finish_class = 'unknown') AS n_finish_unknown,
        count(*) FILTER (is_ok AND usage_invalid_reason IS NOT NULL) AS n_usage_invalid,
        count(*) FILTER (is_ok AND usage_present AND reasoning_tokens IS NULL) AS n_ok_without_reasoning_count,
        sum(hidden_reasoning_tokens) FILTER (is_ok) AS sum_hidden_reasoning_tokens,
        count(*) FILTER (is_ok AND tpot_ms IS NOT NULL AND token_event_tokens[1] IS NULL)
            AS n_tpot_first_event_assumed,
        count(*) FILTER (is_ok AND usage_present) AS n_ok_with_usage,
        count(*) FILTER (slo_met IS NOT NULL) AS n_slo_judged,
        count(*) FILTER (is_ok AND slo_met) AS n_good,
        count(*) FILTER (grade IN ('correct', 'wrong')) AS n_graded,
        count(*) FILTER (grade = 'correct') AS n_correct,
        count(*) FILTER (grade = 'correct' AND slo_met) AS n_good_correct,
        min(intended_ns) AS first_intended_ns,
        max(intended_ns) AS last_intended_ns,
        count(intended_ns) AS n_intended,
        min(sent_ns) AS first_sent_ns,
        max(sent_ns) AS last_sent_ns,
        max(end_ns) FILTER (end_ns IS NOT NULL AND outcome <> 'cancelled') AS last_end_ns,
        sum(output_tokens) FILTER (is_ok) AS sum_output_tokens,
        sum(prompt_tokens) FILTER (is_ok) AS sum_prompt_tokens,
        sum(cached_tokens) FILTER (is_ok) AS sum_cached_tokens,
        count(cached_tokens) FILTER (is_ok) AS n_ok_with_cached,
        struct_pack(count := count(ttft_ms) FILTER (is_ok), mean := avg(ttft_ms) FILTER (is_ok),
                    min := min(ttft_ms) FILTER (is_ok),
                    p50 := quantile_cont(ttft_ms, 0.5) FILTER (is_ok), p90 := quantile_cont(ttft_ms, 0.9) FILTER (is_ok),
                    p95 := quantile_cont(ttft_ms, 0.95) FILTER (is_ok), p99 := quantile_cont(ttft_ms, 0.99) FILTER (is_ok),
                    max := max(ttft_ms) FILTER (is_ok)) AS ttft_ms,
        struct_pack(count := count(ttfc_ms) FILTER (is_ok), mean := avg(ttfc_ms) FILTER (is_ok),
                    min := min(ttfc_ms) FILTER (is_ok),
                    p50 := quantile_cont(ttfc_ms, 0.5) FILTER (is_ok), p90 := quantile_cont(ttfc_ms, 0.9) FILTER (is_ok),
                    p95 := quantile_cont(ttfc_ms, 0.95) FILTER (is_ok), p99 := quantile_cont(ttfc_ms, 0.99) FILTER (is_ok),
                    max := max(ttfc_ms) FILTER (is_ok)) AS ttfc_ms,
        struct_pack(count := count(e2e_ms) FILTER (is_ok), mean := avg(e2e_ms) FILTER (is_ok),
                    min := min(e2e_ms) FILTER (is_ok),
                    p50 := quantile_cont(e2e_ms, 0.5) FILTER (is_ok), p90 := quantile_cont(e2e_ms, 0.9) FILTER (is_ok),
                    p95 := quantile_cont(e2e_ms, 0.95) FILTER (is_ok), p99 := quantile_cont(e2e_ms, 0.99) FILTER (is_ok),
                    max := max(e2e_ms) FILTER (is_ok)) AS e2e_ms,
        struct_pack(count := count(e2e_ms), mean := avg(e2e_ms), min := min(e2e_ms),
                    p50 := quantile_cont(e2e_ms, 0.5), p90 := quantile_cont(e2e_ms, 0.9),
                    p95 := quantile_cont(e2e_ms, 0.95), p99 := quantile_cont(e2e_ms, 0.99),
                    max := max(e2e_ms)) AS e2e_all_ms,
        struct_pack(count := count(e2e_intended_ms) FILTER (is_ok), mean := avg(e2e_intended_ms) FILTER (is_ok),
                    min := min(e2e_intended_ms) FILTER (is_ok),
                    p50 := quantile_cont(e2e_intended_ms, 0.5) FILTER (is_ok),
                    p90 := quantile_cont(e2e_intended_ms, 0.9) FILTER (is_ok),
                    p95 := quantile_cont(e2e_intended_ms, 0.95) FILTER (is_ok),
                    p99 := quantile_cont(e2e_intended_ms, 0.99) FILTER (is_ok),
                    max := max(e2e_intended_ms) FILTER (is_ok)) AS e2e_intended_ms,
        struct_pack(count := count(tpot_ms) FILTER (is_ok), mean := avg(tpot_ms) FILTER (is_ok),
                    min := min(tpot_ms) FILTER (is_ok),
                    p50 := quantile_cont(tpot_ms, 0.5) FILTER (is_ok), p90 := quantile_cont(tpot_ms, 0.9) FILTER (is_ok),
                    p95 := quantile_cont(tpot_ms, 0.95) FILTER (is_ok), p99 := quantile_cont(tpot_ms, 0.99) FILTER (is_ok),
                    max := max(tpot_ms) FILTER (is_ok)) AS tpot_ms,
        struct_pack(count := count(itl_req_mean_ms) FILTER (is_ok), mean := avg(itl_req_mean_ms) FILTER (is_ok),
                    min := min(itl_req_mean_ms) FILTER (is_ok),
                    p50 := quantile_cont(itl_req_mean_ms, 0.5) FILTER (is_ok),
                    p90 := quantile_cont(itl_req_mean_ms, 0.9) FILTER (is_ok),
                    p95 := quantile_cont(itl_req_mean_ms, 0.95) FILTER (is_ok),
                    p99 := quantile_cont(itl_req_mean_ms, 0.99) FILTER (is_ok),
                    max := max(itl_req_mean_ms) FILTER (is_ok)) AS itl_req_mean_ms,
        struct_pack(count := count(schedule_lag_ms), mean := avg(schedule_lag_ms), min := min(schedule_lag_ms),
                    p50 := quantile_cont(schedule_lag_ms, 0.5), p90 := quantile_cont(schedule_lag_ms, 0.9),
                    p95 := quantile_cont(schedule_lag_ms, 0.95), p99 := quantile_cont(schedule_lag_ms, 0.99),
                    max := max(schedule_lag_ms)) AS schedule_lag_ms,
        struct_pack(count := count(tokens_per_event) FILTER (is_ok), mean := avg(tokens_per_event) FILTER (is_ok),
                    min := min(tokens_per_event) FILTER (is_ok),
                    p50 := quantile_cont(tokens_per_event, 0.5) FILTER (is_ok),
                    p90 := quantile_cont(tokens_per_event, 0.9) FILTER (is_ok),
                    p95 := quantile_cont(tokens_per_event, 0.95) FILTER (is_ok),
                    p99 := quantile_cont(tokens_per_event, 0.99) FILTER (is_ok),
                    max := max(tokens_per_event) FILTER (is_ok)) AS tokens_per_event
    FROM grouped
    GROUP BY ALL
),
derived AS (
    SELECT
        s.*,
        (s.last_end_ns - s.first_intended_ns) / 1e9 AS window_s,
        s.n_ok_with_usage / nullif(s.n_ok, 0) AS usage_coverage,
        s.n_ok > 0 AND s.n_ok_with_usage = s.n_ok AND s.n_usage_invalid = 0 AS totals_known,
        CASE WHEN s.n_ok > 0 AND s.n_ok_with_usage = s.n_ok AND s.n_usage_invalid = 0
             THEN s.sum_output_tokens END AS output_tokens_total,
        CASE WHEN s.n_ok > 0 AND s.n_ok_with_usage = s.n_ok AND s.n_usage_invalid = 0
             THEN s.sum_prompt_tokens END AS prompt_tokens_total,
        CASE
            WHEN s.n_ok = 0 THEN 'no successful request'
            WHEN s.n_ok_with_usage < s.n_ok
                THEN (s.n_ok - s.n_ok_with_usage) || ' of ' || s.n_ok || ' successful requests lack server usage'
            WHEN s.n_usage_invalid > 0
                THEN s.n_usage_invalid || ' of ' || s.n_ok
                     || ' successful requests have server token counts that cannot be true (usage_invalid_reason)'
        END AS token_totals_null_reason,
        CASE WHEN s.n_intended >= 2 AND s.last_intended_ns > s.first_intended_ns
             THEN (s.n_intended - 1) / ((s.last_intended_ns - s.first_intended_ns) / 1e9) END AS offered_rate_per_s,
        CASE WHEN s.n_sent >= 2 AND s.last_sent_ns > s.first_sent_ns
             THEN (s.n_sent - 1) / ((s.last_sent_ns - s.first_sent_ns) / 1e9) END AS achieved_send_rate_per_s,
        1 - s.n_ok / nullif(s.n_sent - s.n_recorded_error, 0) AS error_rate
    FROM stats AS s
)
SELECT
    d.run_id, d.group_by, d.group_key,
    d.n_samples, d.n_sent, d.n_ok, d.n_http_error, d.n_transport_error, d.n_timeout,
    d.n_protocol_error, d.n_empty_output, d.n_graded_wrong, d.n_grading_error,
    d.n_cancelled, d.n_dropped, d.n_aborted, d.n_recorded_error, d.error_rate,
    d.n_refusal, d.n_length, d.n_content_filter, d.n_finish_unknown, d.n_usage_invalid,
    d.n_tpot_first_event_assumed,
    d.window_s,
    d.n_ok / nullif(d.window_s, 0) AS request_throughput_per_s,
    d.offered_rate_per_s,
    d.achieved_send_rate_per_s,
    d.usage_coverage, d.n_ok_with_usage,
    d.output_tokens_total, d.prompt_tokens_total,
    CASE WHEN d.totals_known THEN d.sum_cached_tokens END AS cached_tokens_total,
    CASE WHEN d.totals_known AND d.n_ok_with_cached = d.n_ok
         THEN d.sum_cached_tokens / nullif(d.sum_prompt_tokens, 0) END AS prefix_cache_hit_rate,
    CASE WHEN d.totals_known AND d.n_ok_without_reasoning_count = 0 THEN d.sum_hidden_reasoning_tokens END
        AS hidden_reasoning_tokens_total,
    d.token_totals_null_reason,
    d.output_tokens_total / nullif(d.window_s, 0) AS output_throughput_tok_per_s,
    CASE WHEN d.n_slo_judged > 0 THEN d.n_good / nullif(d.window_s, 0) END AS goodput_per_s,
    CASE WHEN d.n_slo_judged > 0 THEN d.n_good END AS n_good,
    c.max_concurrency,
    c.mean_concurrency,
    d.ttft_ms, d.ttfc_ms, d.e2e_ms, d.e2e_all_ms, d.e2e_intended_ms, d.tpot_ms,
    d.itl_req_mean_ms, g.itl_event_ms, g.itl_token_ms, d.tokens_per_event, d.schedule_lag_ms,
    d.n_graded, d.n_correct,
    d.n_correct / nullif(d.n_graded, 0) AS accuracy,
    CASE WHEN d.n_graded > 0 THEN d.n_correct / nullif(d.window_s, 0) END AS correct_throughput_per_s,
    CASE WHEN d.n_graded > 0 AND d.n_slo_judged > 0 THEN d.n_good_correct END AS n_good_correct,
    CASE WHEN d.n_graded > 0 AND d.n_slo_judged > 0 THEN d.n_good_correct / nullif(d.window_s, 0) END
        AS goodput_correct_per_s
FROM derived AS d
LEFT JOIN gap_stats AS g USING (run_id, group_by, group_key)
LEFT JOIN concurrency AS c USING (run_id, group_by, group_key)
ORDER BY d.run_id, d.group_by, d.group_key
