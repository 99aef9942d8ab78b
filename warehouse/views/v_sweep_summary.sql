-- v_sweep_summary: one row per (run, sweep point), the headline table of a sweep.
-- Request metrics are samples_summary's rows with group_by = 'sweep_point'
-- (benchmaker/sql/summary.sql unchanged), flattened: pNN_<metric>_ms with n_<metric>
-- its sample count (linear percentiles, quantile_cont; ITL = gaps between successive
-- token-bearing events, pooled). Episode metrics come from `episodes`.
-- Achieved concurrency: max and time-weighted mean number of episodes in flight
-- (started_ns..ended_ns), or of requests in flight when the point has no episodes.
-- Concurrency proof and usage coverage (issue #6) come from sweep_points (written by
-- replay.sweep.summarize_point; NULL for engine points and derived points).
-- A point is valid when its target concurrency is unknown or was reached (DESIGN §4), its
-- concurrency proof did not fail, and the verdict written with it in sweep_points.jsonl
-- (engine self-checks, failed or late shards) was not invalid; invalid_reason is that
-- written verdict's reasons when there are any, else the reason found here.
CREATE OR REPLACE VIEW v_sweep_summary AS
WITH point_rows AS (
    SELECT * EXCLUDE (group_by) RENAME (group_key AS sweep_point)
    FROM samples_summary
    WHERE group_by = 'sweep_point'
),
episode_stats AS (
    SELECT
        run_id, sweep_point,
        count(*) AS n_episodes,
        sum(n_turns) AS n_turns,
        avg(model_time_ns) / 1e6 AS mean_model_time_ms,
        avg(tool_time_ns) / 1e6 AS mean_tool_time_ms,
        sum(misses_unknown_key) AS misses_unknown_key,
        sum(misses_beyond_turns) AS misses_beyond_turns,
        sum(misses_diverged) AS misses_diverged,
        sum(misses_unknown_key + misses_beyond_turns + misses_diverged) AS misses_total,
        sum(divergences) AS divergences,
        count(*) FILTER (resolved) AS n_resolved,
        count(resolved) AS n_resolution_known,
        count(*) FILTER (resolved IS NOT NULL AND reverified) AS n_reverified,
        count(*) FILTER (outcome <> 'ok') AS n_episodes_failed
    FROM episodes
    WHERE sweep_point IS NOT NULL
    GROUP BY ALL
),
episode_edges AS (
    SELECT run_id, sweep_point, started_ns AS t_ns, 1 AS delta
    FROM episodes WHERE sweep_point IS NOT NULL AND started_ns IS NOT NULL AND ended_ns IS NOT NULL
    UNION ALL
    SELECT run_id, sweep_point, ended_ns, -1
    FROM episodes WHERE sweep_point IS NOT NULL AND started_ns IS NOT NULL AND ended_ns IS NOT NULL
),
episode_steps AS (
    SELECT
        run_id, sweep_point,
        sum(delta) OVER w AS in_flight,
        lead(t_ns) OVER w - t_ns AS held_ns
    FROM episode_edges
    WINDOW w AS (PARTITION BY run_id, sweep_point ORDER BY t_ns, delta
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
episode_overlap AS (
    SELECT
        run_id, sweep_point,
        max(in_flight) AS max_episodes_in_flight,
        sum(in_flight * held_ns) / nullif(sum(held_ns), 0) AS mean_episodes_in_flight
    FROM episode_steps
    GROUP BY ALL
),
joined AS (
    SELECT
        p.run_id, p.sweep_point, p.concurrency AS target_concurrency, p.rate_per_s AS target_rate_per_s,
        s.n_samples AS n_requests, s.n_ok, s.error_rate, s.window_s,
        s.request_throughput_per_s, s.output_throughput_tok_per_s, s.goodput_per_s,
        s.e2e_ms.count AS n_e2e, s.e2e_ms.mean AS mean_e2e_ms, s.e2e_ms.p50 AS p50_e2e_ms,
        s.e2e_ms.p90 AS p90_e2e_ms, s.e2e_ms.p99 AS p99_e2e_ms,
        s.ttft_ms.count AS n_ttft, s.ttft_ms.mean AS mean_ttft_ms, s.ttft_ms.p50 AS p50_ttft_ms,
        s.ttft_ms.p90 AS p90_ttft_ms, s.ttft_ms.p99 AS p99_ttft_ms,
        s.itl_event_ms.count AS n_itl, s.itl_event_ms.mean AS mean_itl_ms,
        s.itl_event_ms.p50 AS p50_itl_ms, s.itl_event_ms.p90 AS p90_itl_ms,
        s.itl_event_ms.p99 AS p99_itl_ms,
        s.tpot_ms.count AS n_tpot, s.tpot_ms.mean AS mean_tpot_ms, s.tpot_ms.p50 AS p50_tpot_ms,
        s.tpot_ms.p90 AS p90_tpot_ms, s.tpot_ms.p99 AS p99_tpot_ms,
        s.max_concurrency AS max_requests_in_flight,
        s.mean_concurrency AS mean_requests_in_flight,
        e.n_episodes, e.n_episodes_failed, e.n_turns, e.mean_model_time_ms, e.mean_tool_time_ms,
        e.misses_unknown_key, e.misses_beyond_turns, e.misses_diverged, e.misses_total,
        e.divergences, e.n_resolved, e.n_resolution_known, e.n_reverified,
        e.n_resolved / nullif(e.n_resolution_known, 0) AS resolved_rate,
        o.max_episodes_in_flight, o.mean_episodes_in_flight,
        coalesce(o.max_episodes_in_flight, s.max_concurrency) AS achieved_max_concurrency,
        coalesce(o.mean_episodes_in_flight, s.mean_concurrency) AS achieved_mean_concurrency,
        p.max_in_flight AS proof_max_in_flight, p.all_started_before_first_finish, p.proof_ok,
        p.proof_reason, p.n_episodes_usage_complete, p.usage_coverage, p.shards,
        p.valid AS recorded_valid, p.invalid_reason AS recorded_invalid_reason
    FROM sweep_points AS p
    LEFT JOIN point_rows AS s USING (run_id, sweep_point)
    LEFT JOIN episode_stats AS e USING (run_id, sweep_point)
    LEFT JOIN episode_overlap AS o USING (run_id, sweep_point)
)
SELECT
    * EXCLUDE (recorded_valid, recorded_invalid_reason),
    CASE
        WHEN recorded_valid = false THEN false
        WHEN proof_ok = false THEN false
        WHEN target_concurrency IS NULL THEN true
        WHEN achieved_max_concurrency IS NULL THEN false
        ELSE achieved_max_concurrency >= target_concurrency
    END AS valid,
    CASE
        WHEN recorded_valid = false THEN coalesce(recorded_invalid_reason, 'invalid (no reason recorded)')
        WHEN target_concurrency IS NOT NULL AND achieved_max_concurrency IS NULL THEN 'nothing ran at this point'
        WHEN achieved_max_concurrency < target_concurrency
            THEN 'achieved concurrency ' || achieved_max_concurrency || ' < target ' || target_concurrency
        WHEN proof_ok = false THEN 'concurrency proof failed: ' || coalesce(proof_reason, 'no reason recorded')
    END AS invalid_reason
FROM joined
ORDER BY run_id, target_concurrency NULLS LAST, sweep_point;
