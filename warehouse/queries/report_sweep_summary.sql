-- report_sweep_summary: the run's rows of v_sweep_summary, one per sweep point, sorted
-- by number: target concurrency, then target rate, then name (c4 before c16).
-- Parameter: $run_id.
SELECT * FROM v_sweep_summary WHERE run_id = $run_id
ORDER BY target_concurrency NULLS LAST, target_rate_per_s NULLS LAST, sweep_point;
