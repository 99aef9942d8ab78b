-- report_run_summary: the run's row of v_run_summary (benchmaker/engine/sql/summary.sql with
-- group_by = 'run', the numbers of summary.json "run"). Parameter: $run_id.
SELECT * FROM v_run_summary WHERE run_id = $run_id;
