-- episode_summary: one row per (run_id, sweep_point) of agent episodes: the one
-- definition of every episode metric (docs/metrics.md). Read by benchmaker.sweep.sweep.summarize_point
-- (point_summary.json, the CLI table, the Prefect artifact) over one point's files and by
-- the warehouse as the view `episodes_summary` over every run, which v_sweep_summary and
-- the report read (benchmaker/sweep/sql/sweep_summary.sql). Relations in scope:
--   episodes  episodes.jsonl lines (benchmaker.agent.episodes.EPISODE_COLUMNS)
--   turns     turns.jsonl lines (benchmaker.agent.episodes.TURN_COLUMNS)
-- Request metrics (latency, throughput, usage coverage) are not here: a model call is a
-- request, defined once in benchmaker/engine/sql/summary.sql. Definitions:
--   n_episodes_failed       episodes whose outcome is not 'ok'
--   n_episodes_diverged     episodes whose outcome is 'diverged' (command mode: the agent
--                           sent a request the replay server refused, and was stopped)
--   mean_model_time_ms      mean per episode of the time spent awaiting the model's stream
--   mean_tool_time_ms       mean per episode of the time spent running tool calls
--   misses_*                replay-server misses by kind (unknown key, beyond the recorded
--                           turns, diverged observation); misses_total their sum
--   n_turns_not_byte_equal  turns whose response differed from the recording
--   resolved_rate_reverified  resolved / episodes re-verified with a known resolution
--   resolved_rate_carried     resolved / episodes whose recorded outcome was carried
--                           (never mixed)
--   max_episodes_in_flight, mean_episodes_in_flight  max and time-weighted mean number
--                           of episodes in flight (started_ns .. ended_ns; an episode
--                           ending at the instant another starts does not overlap it)
--   n_started_before_first_end  episodes started before the first episode ended (the
--                           concurrency proof, judged in sweep_summary.sql)
--   n_episodes_usage_complete  episodes whose every model call carried server usage
--                           (usage coverage itself is per request: summary.sql)
-- Stamps are integer ns offsets from the run's t0 (time.perf_counter_ns()).
WITH eps AS (
    SELECT * FROM episodes WHERE sweep_point IS NOT NULL
),
episode_stats AS (
    SELECT
        run_id, sweep_point,
        count(*) AS n_episodes,
        count(*) FILTER (outcome <> 'ok') AS n_episodes_failed,
        count(*) FILTER (outcome = 'diverged') AS n_episodes_diverged,
        coalesce(sum(n_turns), 0) AS n_turns,
        avg(model_time_ns) / 1e6 AS mean_model_time_ms,
        avg(tool_time_ns) / 1e6 AS mean_tool_time_ms,
        coalesce(sum(misses_unknown_key), 0) AS misses_unknown_key,
        coalesce(sum(misses_beyond_turns), 0) AS misses_beyond_turns,
        coalesce(sum(misses_diverged), 0) AS misses_diverged,
        coalesce(sum(divergences), 0) AS divergences,
        count(*) FILTER (reverified AND resolved IS NOT NULL) AS n_reverified,
        count(*) FILTER (reverified AND resolved) AS n_resolved_reverified,
        count(*) FILTER (NOT reverified AND resolved IS NOT NULL) AS n_carried,
        count(*) FILTER (NOT reverified AND resolved) AS n_resolved_carried,
        count(*) FILTER (usage_complete) AS n_episodes_usage_complete,
        min(started_ns) AS started_ns,
        max(ended_ns) AS ended_ns,
        min(ended_ns) AS first_ended_ns
    FROM eps
    GROUP BY ALL
),
turn_stats AS (
    SELECT run_id, sweep_point, count(*) FILTER (byte_equal = false) AS n_turns_not_byte_equal
    FROM turns
    WHERE sweep_point IS NOT NULL
    GROUP BY ALL
),
edges AS (
    SELECT run_id, sweep_point, started_ns AS t_ns, 1 AS delta
    FROM eps WHERE started_ns IS NOT NULL AND ended_ns IS NOT NULL
    UNION ALL
    SELECT run_id, sweep_point, ended_ns, -1
    FROM eps WHERE started_ns IS NOT NULL AND ended_ns IS NOT NULL
),
steps AS (
    -- at equal stamps an end (-1) sorts before a start (+1): touching episodes do not overlap
    SELECT
        run_id, sweep_point,
        sum(delta) OVER w AS in_flight,
        lead(t_ns) OVER w - t_ns AS held_ns
    FROM edges
    WINDOW w AS (PARTITION BY run_id, sweep_point ORDER BY t_ns, delta
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
overlap AS (
    SELECT
        run_id, sweep_point,
        max(in_flight)::INTEGER AS max_episodes_in_flight,
        (sum(in_flight * held_ns) / nullif(sum(held_ns), 0))::DOUBLE AS mean_episodes_in_flight
    FROM steps
    GROUP BY ALL
),
started_early AS (
    SELECT e.run_id, e.sweep_point, count(*) FILTER (e.started_ns < s.first_ended_ns) AS n_started_before_first_end
    FROM eps AS e JOIN episode_stats AS s USING (run_id, sweep_point)
    GROUP BY ALL
)
SELECT
    s.run_id, s.sweep_point,
    s.n_episodes, s.n_episodes_failed, s.n_episodes_diverged, s.n_turns,
    s.mean_model_time_ms, s.mean_tool_time_ms,
    s.misses_unknown_key, s.misses_beyond_turns, s.misses_diverged,
    s.misses_unknown_key + s.misses_beyond_turns + s.misses_diverged AS misses_total,
    s.divergences,
    coalesce(t.n_turns_not_byte_equal, 0) AS n_turns_not_byte_equal,
    s.n_reverified, s.n_resolved_reverified,
    s.n_resolved_reverified / nullif(s.n_reverified, 0) AS resolved_rate_reverified,
    s.n_carried, s.n_resolved_carried,
    s.n_resolved_carried / nullif(s.n_carried, 0) AS resolved_rate_carried,
    s.n_episodes_usage_complete,
    s.started_ns, s.ended_ns,
    o.max_episodes_in_flight, o.mean_episodes_in_flight,
    x.n_started_before_first_end
FROM episode_stats AS s
LEFT JOIN turn_stats AS t USING (run_id, sweep_point)
LEFT JOIN overlap AS o USING (run_id, sweep_point)
LEFT JOIN started_early AS x USING (run_id, sweep_point)
ORDER BY s.run_id, s.sweep_point
