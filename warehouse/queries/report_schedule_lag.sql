-- report_schedule_lag: schedule lag (sent - intended, ms; docs/metrics.md) over the run's
-- time, for the report. Measured requests that were sent are put in $n_bins equal bins
-- of intended time; per bin: p50 (linear, quantile_cont) and max lag and the count.
-- t_s is the bin's start in s from the run's t0 (intended_ns is an offset from t0).
-- Bins without a request give no row. Parameters: $run_id, $n_bins.
WITH lagged AS (
    SELECT intended_ns, (sent_ns - intended_ns) / 1e6 AS schedule_lag_ms
    FROM samples
    WHERE run_id = $run_id AND phase = 'measure'
      AND intended_ns IS NOT NULL AND sent_ns IS NOT NULL
),
span AS (
    SELECT min(intended_ns) AS t_lo, max(intended_ns) AS t_hi FROM lagged
),
binned AS (
    SELECT
        l.schedule_lag_ms,
        s.t_lo, (s.t_hi - s.t_lo) / $n_bins AS width_ns,
        coalesce(least(floor((l.intended_ns - s.t_lo) * $n_bins / nullif(s.t_hi - s.t_lo, 0)),
                       $n_bins - 1), 0)::BIGINT AS bin
    FROM lagged AS l, span AS s
)
SELECT
    bin,
    (any_value(t_lo) + bin * any_value(width_ns)) / 1e9 AS t_s,
    count(*) AS n,
    quantile_cont(schedule_lag_ms, 0.5) AS p50_schedule_lag_ms,
    max(schedule_lag_ms) AS max_schedule_lag_ms
FROM binned
GROUP BY bin
ORDER BY bin;
