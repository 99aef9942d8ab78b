-- report_in_flight: achieved concurrency over the run's time, for the report: the number
-- of measured requests in flight (sent_ns .. end_ns) and of episodes in flight
-- (started_ns .. ended_ns), as in benchmaker/engine/sql/summary.sql and v_sweep_summary (ends
-- sort before starts at the same instant). The span from the first to the last edge
-- is cut into $n_bins equal bins; per series and bin, max_in_flight is the highest count
-- in the bin: the count held on entering it or the count after any edge inside it.
-- t_s is the bin's start in s from the run's t0. Parameters: $run_id, $n_bins.
WITH edges AS (
    SELECT 'requests' AS series, sent_ns AS t_ns, 1 AS delta
    FROM samples
    WHERE run_id = $run_id AND phase = 'measure' AND sent_ns IS NOT NULL AND end_ns IS NOT NULL
    UNION ALL
    SELECT 'requests', end_ns, -1
    FROM samples
    WHERE run_id = $run_id AND phase = 'measure' AND sent_ns IS NOT NULL AND end_ns IS NOT NULL
    UNION ALL
    SELECT 'episodes', started_ns, 1
    FROM episodes
    WHERE run_id = $run_id AND started_ns IS NOT NULL AND ended_ns IS NOT NULL
    UNION ALL
    SELECT 'episodes', ended_ns, -1
    FROM episodes
    WHERE run_id = $run_id AND started_ns IS NOT NULL AND ended_ns IS NOT NULL
),
steps AS (
    SELECT
        series, t_ns,
        sum(delta) OVER w AS in_flight,
        row_number() OVER w AS step
    FROM edges
    WINDOW w AS (PARTITION BY series ORDER BY t_ns, delta
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
span AS (
    SELECT min(t_ns) AS t_lo, max(t_ns) AS t_hi FROM edges
),
binned AS (
    SELECT
        st.series,
        coalesce(least(floor((st.t_ns - s.t_lo) * $n_bins / nullif(s.t_hi - s.t_lo, 0)),
                       $n_bins - 1), 0)::BIGINT AS bin,
        max(st.in_flight) AS max_in_flight,
        arg_max(st.in_flight, st.step) AS end_in_flight
    FROM steps AS st, span AS s
    GROUP BY ALL
),
grid AS (
    SELECT series, unnest(range(0, $n_bins)) AS bin
    FROM (SELECT DISTINCT series FROM edges)
),
filled AS (
    SELECT
        g.series, g.bin,
        b.max_in_flight,
        last_value(b.end_in_flight IGNORE NULLS) OVER (
            PARTITION BY g.series ORDER BY g.bin
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS held_in_flight
    FROM grid AS g
    LEFT JOIN binned AS b USING (series, bin)
)
SELECT
    f.series, f.bin,
    (s.t_lo + f.bin * (s.t_hi - s.t_lo) / $n_bins) / 1e9 AS t_s,
    greatest(coalesce(f.max_in_flight, 0), coalesce(f.held_in_flight, 0)) AS max_in_flight
FROM filled AS f, span AS s
ORDER BY f.series, f.bin;
