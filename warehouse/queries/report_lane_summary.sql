-- report_lane_summary: the run's rows of v_lane_summary, one per lane (summary.json
-- "lanes"). Parameter: $run_id.
SELECT * FROM v_lane_summary WHERE run_id = $run_id;
