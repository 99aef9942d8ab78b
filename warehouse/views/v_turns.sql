-- v_turns: each turn of an agent episode beside its model call. A turn keeps only what
-- a turn has (tool time, miss kind, tool calls, byte equality); its
-- call is a request (an engine Sample), joined by (run_id, sweep_point, episode_id,
-- turn_index). Times in ms from the request's stamps (client perf_counter_ns): TTFT =
-- first token - sent, NULL when no token came; E2E = end - sent. The request columns
-- are NULL for a turn whose call has no request row. In command mode turn_index is the
-- number of assistant messages in the agent's request, so an agent that resends a call
-- gives two turns and two requests of one turn_index, which join crosswise (4 rows).
CREATE OR REPLACE VIEW v_turns AS
SELECT
    t.run_id, t.sweep_point, t.episode_id, t.turn_index, t.shard,
    t.miss_kind, t.tool_time_ns, t.n_tool_calls, t.byte_equal,
    r.outcome, r.http_status, r.finish_reason, r.model,
    r.sent_ns, r.first_token_ns, r.end_ns,
    (r.first_token_ns - r.sent_ns) / 1e6 AS ttft_ms,
    (r.end_ns - r.sent_ns) / 1e6 AS e2e_ms,
    r.prompt_tokens, r.output_tokens, r.cached_tokens,
    r.bytes_sent, r.bytes_received
FROM turns AS t
LEFT JOIN requests AS r
    ON r.run_id = t.run_id AND r.sweep_point IS NOT DISTINCT FROM t.sweep_point
   AND r.episode_id = t.episode_id AND r.turn_index = t.turn_index;
