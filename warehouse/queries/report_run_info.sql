-- report_run_info: the run's manifest facts for the report header, its summary.json
-- verdict (as loaded into runs.summary) and how many episodes/sweep points it has.
-- Parameter: $run_id. No row when the run is not in the warehouse.
SELECT
    r.run_id, r.kind, r.label, r.created_at, r.workers, r.git_sha, r.seed, r.source_dir,
    r.summary -> 'verdict' AS verdict,
    (SELECT count(*) FROM episodes AS e WHERE e.run_id = r.run_id) AS n_episodes,
    (SELECT count(*) FROM sweep_points AS p WHERE p.run_id = r.run_id) AS n_sweep_points
FROM runs AS r
WHERE r.run_id = $run_id;
