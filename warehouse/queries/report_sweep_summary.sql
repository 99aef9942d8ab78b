-- report_sweep_summary: the run's rows of v_sweep_summary, one per sweep point, in the
-- view's order (target concurrency, then name). Parameter: $run_id.
SELECT * FROM v_sweep_summary WHERE run_id = $run_id;
