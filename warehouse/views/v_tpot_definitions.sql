-- v_tpot_definitions: each measured successful request's TPOT by three definitions, from
-- the same sample, so our figure can be set beside vLLM's and aiperf's (all in ms):
--   tpot_ms         ours (benchmaker/engine/sql/summary.sql, docs/stream-rules.md):
--                   (last token event - first token event)
--                   / (output_tokens - hidden_reasoning_tokens - tokens of the first event),
--                   the first event counted as 1 token where the protocol does not state it
--                   (first_event_tokens_assumed); null where usage_invalid_reason is set
--   tpot_vllm_ms    `vllm bench serve` (vllm/benchmarks/serve.py calculate_metrics:
--                   tpot = (latency - ttft) / (output_len - 1), output_len >= 2; latency
--                   ends at the last chunk with `choices`, or in versions that stamp every
--                   data chunk at the usage chunk, vllm/benchmarks/lib/endpoint_request_func.py):
--                   (end - first_token) / (output_tokens - 1). It counts hidden reasoning
--                   tokens, and the time after the last token where the version does
--   tpot_aiperf_ms  aiperf inter_token_latency (src/aiperf/metrics/types/
--                   inter_token_latency_metric.py: (request_latency - ttft)
--                   / (output_sequence_length - first content chunk tokens), the chunk's
--                   tokens 1 when not reported or inconsistent, OSL >= 2):
--                   (end - first_token) / (output_tokens - first event tokens)
-- Differences of timestamps that remain: vLLM's ttft is the first chunk with a `choices`
-- list (a role-only chunk counts), ours and aiperf's the first with generated output;
-- vLLM's and aiperf's latency ends at their last stamped data event, ours at the end of
-- the body (the same read for a normal stream).
CREATE OR REPLACE VIEW v_tpot_definitions AS
WITH base AS (
    SELECT
        run_id, seq, lane, sweep_point, output_tokens, hidden_reasoning_tokens, usage_invalid_reason,
        coalesce(token_event_tokens[1], 1) AS first_event_tokens,
        token_event_tokens[1] IS NULL AS first_event_tokens_assumed,
        (token_event_ns[len(token_event_ns)] - token_event_ns[1]) / 1e6 AS token_span_ms,
        (end_ns - first_token_ns) / 1e6 AS after_first_token_ms,
        len(token_event_ns) AS n_events
    FROM samples
    WHERE phase = 'measure' AND outcome = 'ok' AND first_token_ns IS NOT NULL
)
SELECT
    run_id, seq, lane, sweep_point, output_tokens, hidden_reasoning_tokens, first_event_tokens,
    first_event_tokens_assumed, usage_invalid_reason,
    CASE WHEN usage_invalid_reason IS NULL AND n_events >= 2
              AND output_tokens - coalesce(hidden_reasoning_tokens, 0) - first_event_tokens >= 1
         THEN token_span_ms / (output_tokens - coalesce(hidden_reasoning_tokens, 0) - first_event_tokens)
    END AS tpot_ms,
    CASE WHEN output_tokens >= 2 THEN after_first_token_ms / (output_tokens - 1) END AS tpot_vllm_ms,
    CASE WHEN output_tokens >= 2
         THEN after_first_token_ms / CASE WHEN first_event_tokens >= 1 AND output_tokens - first_event_tokens >= 1
                                          THEN output_tokens - first_event_tokens
                                          ELSE output_tokens - 1 END
    END AS tpot_aiperf_ms
FROM base
ORDER BY run_id, seq;
