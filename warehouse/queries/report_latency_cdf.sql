-- report_latency_cdf: empirical CDF points of TTFT and ITL for the report's plots.
-- Same populations as benchmaker/engine/sql/summary.sql: measured (phase = 'measure'),
-- successful requests; ttft_ms = first_token - sent; itl_event_ms = gaps between
-- successive token-bearing events (pooled). One series per sweep point when the run has
-- sweep points, else one per lane.
-- cum_fraction = rank / n (a right-continuous step CDF). At most about $max_points points
-- per series are kept (every k-th rank, plus the first and the last), so a run of a
-- million requests still draws a small SVG; `n` is the series' full sample count.
-- Parameters: $run_id, $max_points.
WITH measured AS (
    SELECT sweep_point, lane, sent_ns, first_token_ns, token_event_ns
    FROM samples
    WHERE run_id = $run_id AND phase = 'measure' AND outcome = 'ok'
),
by_point AS (
    SELECT count(sweep_point) > 0 AS has_points FROM measured
),
labelled AS (
    SELECT
        m.*,
        CASE WHEN b.has_points THEN coalesce(m.sweep_point, '(no sweep point)')
             ELSE coalesce(m.lane, '(no lane)') END AS series
    FROM measured AS m, by_point AS b
),
vals AS (
    SELECT 'ttft_ms' AS metric, series, (first_token_ns - sent_ns) / 1e6 AS value_ms
    FROM labelled
    WHERE first_token_ns IS NOT NULL AND sent_ns IS NOT NULL
    UNION ALL
    SELECT 'itl_event_ms', series,
           unnest(list_transform(range(1, len(token_event_ns)),
                                 lambda i: (token_event_ns[i + 1] - token_event_ns[i]) / 1e6))
    FROM labelled
    WHERE len(token_event_ns) >= 2
),
ranked AS (
    SELECT
        metric, series, value_ms,
        row_number() OVER (PARTITION BY metric, series ORDER BY value_ms) AS rank,
        count(*) OVER (PARTITION BY metric, series) AS n
    FROM vals
)
SELECT metric, series, value_ms, rank / n AS cum_fraction, n
FROM ranked
WHERE rank = 1 OR rank = n OR rank % greatest(1, n // $max_points) = 0
ORDER BY metric, series, rank;
