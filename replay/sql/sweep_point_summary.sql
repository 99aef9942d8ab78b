-- sweep_point_summary: one row summarising one sweep point of an agent replay sweep
-- (issue #4 item 3), read from that point's episodes.jsonl and turns.jsonl
-- (notes/CONTRACTS.md). Run by replay.sweep.summarize_point with two views in scope:
--   episodes  the point's episodes.jsonl (typed by replay.episodes.EPISODE_COLUMNS)
--   turns     the point's turns.jsonl   (typed by replay.episodes.TURN_COLUMNS)
-- Stamps are ns offsets from the run's t0 (time.perf_counter_ns()); shown in ms / s.
-- Percentiles: linear interpolation (quantile_cont), each with its sample count n_*.
WITH turn_stats AS (
    SELECT
        count(*) AS n_requests,
        count(*) FILTER (outcome = 'ok') AS n_requests_ok,
        -- window: first request sent .. last request ended (DESIGN §4 request throughput)
        (max(end_ns) - min(sent_ns)) / 1e9 AS window_s,
        count(*) FILTER (outcome = 'ok') AS n_e2e,
        quantile_cont((end_ns - sent_ns) / 1e6, 0.50) FILTER (outcome = 'ok') AS p50_e2e_ms,
        quantile_cont((end_ns - sent_ns) / 1e6, 0.90) FILTER (outcome = 'ok') AS p90_e2e_ms,
        quantile_cont((end_ns - sent_ns) / 1e6, 0.99) FILTER (outcome = 'ok') AS p99_e2e_ms,
        count(first_token_ns) AS n_ttft,
        quantile_cont((first_token_ns - sent_ns) / 1e6, 0.50) AS p50_ttft_ms,
        quantile_cont((first_token_ns - sent_ns) / 1e6, 0.90) AS p90_ttft_ms,
        quantile_cont((first_token_ns - sent_ns) / 1e6, 0.99) AS p99_ttft_ms,
        count(*) FILTER (byte_equal = false) AS n_not_byte_equal
    FROM turns
),
episode_stats AS (
    SELECT
        count(*) AS n_episodes,
        count(*) FILTER (outcome <> 'ok') AS n_episodes_failed,
        coalesce(sum(n_turns), 0) AS n_turns,
        avg(model_time_ns) / 1e6 AS mean_model_time_ms,
        avg(tool_time_ns) / 1e6 AS mean_tool_time_ms,
        coalesce(sum(misses_unknown_key), 0) AS misses_unknown_key,
        coalesce(sum(misses_beyond_turns), 0) AS misses_beyond_turns,
        coalesce(sum(misses_diverged), 0) AS misses_diverged,
        coalesce(sum(divergences), 0) AS divergences,
        -- resolved rate, re-verified (a verifier ran) vs carried (recorded outcome)
        count(*) FILTER (reverified AND resolved IS NOT NULL) AS n_reverified,
        count(*) FILTER (reverified AND resolved) AS n_resolved_reverified,
        count(*) FILTER (NOT reverified AND resolved IS NOT NULL) AS n_carried,
        count(*) FILTER (NOT reverified AND resolved) AS n_resolved_carried,
        min(started_ns) AS started_ns,
        max(ended_ns) AS ended_ns,
        -- usage coverage (issue #6): episodes whose every model call carried usage
        count(*) FILTER (usage_complete) AS n_episodes_usage_complete,
        sum(prompt_tokens) AS sum_prompt_tokens,
        sum(output_tokens) AS sum_output_tokens
    FROM episodes
),
edges AS (
    SELECT started_ns AS t_ns, 1 AS delta FROM episodes
    UNION ALL
    SELECT ended_ns AS t_ns, -1 AS delta FROM episodes
),
steps AS (
    -- at equal stamps an end (-1) sorts before a start (+1): touching episodes do not overlap
    SELECT
        sum(delta) OVER w AS in_flight,
        lead(t_ns) OVER w - t_ns AS held_ns
    FROM edges
    WINDOW w AS (ORDER BY t_ns, delta ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
overlap AS (
    SELECT
        max(in_flight) AS achieved_max_concurrency,
        sum(in_flight * held_ns) / nullif(sum(held_ns), 0) AS achieved_mean_concurrency
    FROM steps
)
SELECT
    e.n_episodes, e.n_episodes_failed, e.n_turns,
    t.n_requests, t.n_requests_ok, t.window_s,
    t.n_requests_ok / nullif(t.window_s, 0) AS request_throughput_per_s,
    t.n_e2e, t.p50_e2e_ms, t.p90_e2e_ms, t.p99_e2e_ms,
    t.n_ttft, t.p50_ttft_ms, t.p90_ttft_ms, t.p99_ttft_ms,
    e.mean_model_time_ms, e.mean_tool_time_ms,
    e.misses_unknown_key, e.misses_beyond_turns, e.misses_diverged,
    e.misses_unknown_key + e.misses_beyond_turns + e.misses_diverged AS misses_total,
    e.divergences, t.n_not_byte_equal,
    e.n_reverified, e.n_resolved_reverified,
    e.n_resolved_reverified / nullif(e.n_reverified, 0) AS resolved_rate_reverified,
    e.n_carried, e.n_resolved_carried,
    e.n_resolved_carried / nullif(e.n_carried, 0) AS resolved_rate_carried,
    e.started_ns, e.ended_ns,
    e.n_episodes_usage_complete,
    e.n_episodes_usage_complete / nullif(e.n_episodes, 0) AS usage_coverage,
    -- token totals only at full coverage: never a partial sum, never 0 for unknown
    CASE WHEN e.n_episodes > 0 AND e.n_episodes_usage_complete = e.n_episodes
         THEN e.sum_prompt_tokens END AS prompt_tokens_total,
    CASE WHEN e.n_episodes > 0 AND e.n_episodes_usage_complete = e.n_episodes
         THEN e.sum_output_tokens END AS output_tokens_total,
    CASE WHEN e.n_episodes > e.n_episodes_usage_complete
         THEN 'usage incomplete in ' || (e.n_episodes - e.n_episodes_usage_complete) || ' of '
              || e.n_episodes || ' episodes' END AS token_totals_null_reason,
    o.achieved_max_concurrency::INTEGER AS achieved_max_concurrency,
    o.achieved_mean_concurrency::DOUBLE AS achieved_mean_concurrency
FROM turn_stats AS t, episode_stats AS e, overlap AS o;
