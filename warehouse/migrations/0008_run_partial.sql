-- 0008: runs that did not finish. `partial` is true when the bundle's
-- summary.json says "partial": true (Ctrl-C, SIGTERM, SIGHUP: in-flight requests were
-- recorded as cancelled) or when the bundle has no summary.json at all (the process was
-- killed before it could write one); `partial_reason` says which. A partial run's rows
-- are kept for inspection; `benchmaker runs` shows the flag. Rows loaded before: from
-- their stored summary (NULL summary: partial, no reason known then).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS partial BOOLEAN;          -- true: the run did not finish
ALTER TABLE runs ADD COLUMN IF NOT EXISTS partial_reason VARCHAR;   -- why, NULL when complete
UPDATE runs SET
    partial = coalesce(try_cast(summary ->> 'partial' AS BOOLEAN), summary IS NULL),
    partial_reason = CASE
        WHEN summary IS NULL THEN 'no summary.json in the bundle'
        WHEN try_cast(summary ->> 'partial' AS BOOLEAN) THEN 'summary.json says partial'
    END
WHERE partial IS NULL;
