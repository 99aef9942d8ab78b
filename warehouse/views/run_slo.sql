-- run_slo: one row per run that declared an SLO (runs.slo, the manifest's `slo`): its
-- bounds in ms, NULL where not declared. benchmaker/engine/sql/summary.sql (samples_summary)
-- judges every sample's slo_met by these, as the run bundle's summary.json does.
CREATE OR REPLACE VIEW run_slo AS
SELECT
    run_id,
    TRY_CAST(slo->>'ttft_ms' AS DOUBLE) AS ttft_ms,
    TRY_CAST(slo->>'tpot_ms' AS DOUBLE) AS tpot_ms,
    TRY_CAST(slo->>'e2e_ms' AS DOUBLE) AS e2e_ms
FROM runs
WHERE slo IS NOT NULL;
