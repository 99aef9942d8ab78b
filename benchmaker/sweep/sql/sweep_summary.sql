-- sweep_summary: one row per (run_id, sweep_point), the headline table of a sweep, and
-- the one place a point's verdict is decided. The warehouse installs it as the view
-- v_sweep_summary (over every run; the report reads it); benchmaker.sweep.sweep.summarize_point
-- runs it over one point's files for point_summary.json, sweep_points.jsonl and the CLI
-- table, so those and the view carry the same numbers. Relations in scope:
--   sweep_points      the points as their writer declared them: run_id, sweep_point,
--                     concurrency (target episodes or requests in flight, NULL open
--                     loop), rate_per_s (target arrivals/s), episodes (episodes asked
--                     for), shards, verdict_reasons (what the writer found that the rows
--                     cannot show: engine self-checks, failed or late shards; '; '-joined)
--   samples_summary   benchmaker/engine/sql/summary.sql over the samples (group_by = 'sweep_point'
--                     rows are read): every request metric, a model call of an episode
--                     included; stat structs flattened to pNN_<metric>_ms with n_<metric>
--                     its count (linear percentiles, quantile_cont); n_recorded_error
--                     (calls that failed in the original recording, served as recorded:
--                     out of error_rate) and n_aborted (responses ended with finish
--                     reason abort/error/cancelled/unknown) as summary.sql counts them
--   episodes_summary  benchmaker/sweep/sql/episode_summary.sql: every episode metric
-- Achieved concurrency: episodes in flight when the point has episodes, else requests
-- in flight. Concurrency proof (for points with episodes and a target): the
-- most episodes in flight and the episodes started before the first one ended both reach
-- min(target, episodes). Verdict (docs/metrics.md): invalid_reason is the first failed check
-- of (nothing ran, achieved max < target, proof failed), then "no episode succeeded" with
-- what did (episodes failed and diverged, requests that succeeded: a model call of a
-- failed episode may have), followed by the writer's verdict_reasons; valid =
-- invalid_reason IS NULL. Reasons are '; '-joined, so none holds '; '.
WITH points AS (
    SELECT run_id, sweep_point, concurrency, rate_per_s, episodes, shards,
           nullif(verdict_reasons, '') AS verdict_reasons
    FROM sweep_points
),
requests AS (
    SELECT * EXCLUDE (group_by) RENAME (group_key AS sweep_point)
    FROM samples_summary
    WHERE group_by = 'sweep_point'
),
joined AS (
    SELECT
        p.run_id, p.sweep_point,
        p.concurrency AS target_concurrency, p.rate_per_s AS target_rate_per_s, p.episodes AS target_episodes,
        p.shards,
        coalesce(r.n_samples, 0) AS n_requests, coalesce(r.n_ok, 0) AS n_ok,
        coalesce(r.n_recorded_error, 0) AS n_recorded_error, coalesce(r.n_aborted, 0) AS n_aborted,
        r.error_rate, r.window_s,
        r.request_throughput_per_s, r.output_throughput_tok_per_s, r.goodput_per_s, r.n_good,
        r.usage_coverage, r.n_ok_with_usage, r.prompt_tokens_total, r.output_tokens_total,
        r.token_totals_null_reason,
        r.e2e_ms.count AS n_e2e, r.e2e_ms.mean AS mean_e2e_ms, r.e2e_ms.p50 AS p50_e2e_ms,
        r.e2e_ms.p90 AS p90_e2e_ms, r.e2e_ms.p99 AS p99_e2e_ms,
        r.ttft_ms.count AS n_ttft, r.ttft_ms.mean AS mean_ttft_ms, r.ttft_ms.p50 AS p50_ttft_ms,
        r.ttft_ms.p90 AS p90_ttft_ms, r.ttft_ms.p99 AS p99_ttft_ms,
        r.itl_event_ms.count AS n_itl, r.itl_event_ms.mean AS mean_itl_ms,
        r.itl_event_ms.p50 AS p50_itl_ms, r.itl_event_ms.p90 AS p90_itl_ms, r.itl_event_ms.p99 AS p99_itl_ms,
        r.tpot_ms.count AS n_tpot, r.tpot_ms.mean AS mean_tpot_ms, r.tpot_ms.p50 AS p50_tpot_ms,
        r.tpot_ms.p90 AS p90_tpot_ms, r.tpot_ms.p99 AS p99_tpot_ms,
        r.max_concurrency::INTEGER AS max_requests_in_flight,
        r.mean_concurrency::DOUBLE AS mean_requests_in_flight,
        coalesce(e.n_episodes, 0) AS n_episodes, coalesce(e.n_episodes_failed, 0) AS n_episodes_failed,
        coalesce(e.n_episodes_diverged, 0) AS n_episodes_diverged,
        coalesce(e.n_turns, 0) AS n_turns, e.mean_model_time_ms, e.mean_tool_time_ms,
        e.misses_unknown_key, e.misses_beyond_turns, e.misses_diverged, e.misses_total, e.divergences,
        e.n_turns_not_byte_equal,
        e.n_reverified, e.n_resolved_reverified, e.resolved_rate_reverified,
        e.n_carried, e.n_resolved_carried, e.resolved_rate_carried,
        e.n_episodes_usage_complete, e.started_ns, e.ended_ns,
        e.max_episodes_in_flight, e.mean_episodes_in_flight, e.n_started_before_first_end,
        coalesce(e.max_episodes_in_flight, r.max_concurrency)::INTEGER AS achieved_max_concurrency,
        coalesce(e.mean_episodes_in_flight, r.mean_concurrency)::DOUBLE AS achieved_mean_concurrency,
        CASE WHEN p.concurrency IS NOT NULL AND e.n_episodes > 0 THEN least(p.concurrency, e.n_episodes) END
            AS proof_target,
        p.verdict_reasons
    FROM points AS p
    LEFT JOIN requests AS r USING (run_id, sweep_point)
    LEFT JOIN episodes_summary AS e USING (run_id, sweep_point)
),
proved AS (
    SELECT
        * EXCLUDE (proof_target, n_started_before_first_end, verdict_reasons),
        CASE WHEN proof_target IS NOT NULL THEN n_started_before_first_end >= proof_target END
            AS all_started_before_first_finish,
        CASE WHEN proof_target IS NOT NULL
             THEN nullif(concat_ws('; ',
                    CASE WHEN max_episodes_in_flight < proof_target
                         THEN 'max episodes in flight ' || max_episodes_in_flight || ' < target ' || proof_target END,
                    CASE WHEN n_started_before_first_end < proof_target
                         THEN 'only ' || n_started_before_first_end || ' of ' || proof_target
                              || ' episodes started before the first finished' END), '') END AS proof_reason,
        verdict_reasons
    FROM joined
),
judged AS (
    SELECT
        * EXCLUDE (proof_reason, verdict_reasons),
        CASE WHEN all_started_before_first_finish IS NOT NULL THEN proof_reason IS NULL END AS proof_ok,
        proof_reason,
        verdict_reasons,
        nullif(concat_ws('; ',
            CASE
                WHEN target_concurrency IS NOT NULL AND achieved_max_concurrency IS NULL
                    THEN 'nothing ran at this point'
                WHEN achieved_max_concurrency < target_concurrency
                    THEN 'achieved concurrency ' || achieved_max_concurrency || ' < target ' || target_concurrency
                WHEN proof_reason IS NOT NULL THEN 'concurrency proof failed: ' || proof_reason
            END,
            CASE WHEN n_episodes > 0 AND n_episodes_failed = n_episodes
                 THEN 'no episode succeeded: ' || n_episodes_failed || ' of ' || n_episodes || ' failed ('
                      || n_episodes_diverged || ' diverged), ' || n_ok || ' of ' || n_requests
                      || ' requests succeeded' END,
            verdict_reasons), '') AS invalid_reason
    FROM proved
)
SELECT * EXCLUDE (invalid_reason), invalid_reason IS NULL AS valid, invalid_reason
FROM judged
ORDER BY run_id, target_concurrency NULLS LAST, sweep_point
