-- compare_key(concurrency, rate_per_s, sweep_point): scalar macro, the key on which
-- compare_points (and `benchmaker compare`) match the sweep points of two runs: their
-- target, not their label. 'concurrency=N' for a closed-loop point (sweep_points.
-- concurrency: episodes or requests in flight), else 'rate=R/s' for an open-loop point
-- (sweep_points.rate_per_s, arrivals per second), else the label itself (a point with
-- neither, e.g. a stages spec), else 'run' (requests without a sweep point).
CREATE OR REPLACE MACRO compare_key(concurrency, rate_per_s, sweep_point) AS
    CASE
        WHEN concurrency IS NOT NULL THEN 'concurrency=' || concurrency
        WHEN rate_per_s IS NOT NULL THEN 'rate=' || rate_per_s::VARCHAR || '/s'
        ELSE coalesce(sweep_point, 'run')
    END;
