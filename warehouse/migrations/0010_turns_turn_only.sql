-- 0010: a turn keeps only what a turn has. Every model call of an
-- agent episode is a request (an engine Sample in samples.jsonl, a row of `requests`
-- with episode_id and turn_index since 0007), so the figures turns.jsonl used to repeat
-- are read from there: timings (sent_ns, first_token_ns, end_ns), outcome, http_status,
-- usage (prompt_tokens, output_tokens, cached_tokens) and the response model. What is
-- left on `turns`: run_id, sweep_point, episode_id, turn_index (the key of its request:
--   SELECT t.*, r.outcome, (r.first_token_ns - r.sent_ns) / 1e6 AS ttft_ms
--   FROM turns t JOIN requests r USING (run_id, sweep_point, episode_id, turn_index)
-- or the view v_turns), shard, miss_kind, tool_time_ns, n_tool_calls, byte_equal.
-- Rows loaded before lose nothing: a sweep's calls were loaded as requests too (each
-- turn of a replay became a sample since the first replay bundles); a turn with no
-- request of its key (a bundle of `benchmaker episode --out` or an old live run, which
-- wrote no samples) first becomes one, lane 'agent', phase 'measure', from its own
-- figures (meta.source 'turns'). Bundles whose turns.jsonl still has these keys load as
-- before (benchmaker.warehouse.loader does the same for such turns without samples).
INSERT INTO requests (run_id, lane, sweep_point, worker, phase, outcome, http_status, intended_ns, sent_ns,
                      first_token_ns, end_ns, usage_present, prompt_tokens, output_tokens, cached_tokens,
                      model, meta, shard, episode_id, turn_index)
SELECT t.run_id, 'agent', t.sweep_point, 0, 'measure', t.outcome, t.http_status, t.sent_ns, t.sent_ns,
       t.first_token_ns, t.end_ns, t.prompt_tokens IS NOT NULL AND t.output_tokens IS NOT NULL,
       t.prompt_tokens, t.output_tokens, t.cached_tokens, t.model,
       json_object('episode_id', t.episode_id, 'turn_index', t.turn_index, 'miss_kind', t.miss_kind,
                   'source', 'turns'),
       coalesce(t.shard, 0), t.episode_id, t.turn_index
FROM turns AS t
WHERE NOT EXISTS (
    SELECT 1 FROM requests AS r
    WHERE r.run_id = t.run_id AND r.sweep_point IS NOT DISTINCT FROM t.sweep_point
      AND r.episode_id = t.episode_id AND r.turn_index = t.turn_index);
ALTER TABLE turns DROP COLUMN IF EXISTS sent_ns;
ALTER TABLE turns DROP COLUMN IF EXISTS first_token_ns;
ALTER TABLE turns DROP COLUMN IF EXISTS end_ns;
ALTER TABLE turns DROP COLUMN IF EXISTS outcome;
ALTER TABLE turns DROP COLUMN IF EXISTS http_status;
ALTER TABLE turns DROP COLUMN IF EXISTS prompt_tokens;
ALTER TABLE turns DROP COLUMN IF EXISTS output_tokens;
ALTER TABLE turns DROP COLUMN IF EXISTS cached_tokens;
ALTER TABLE turns DROP COLUMN IF EXISTS model;
