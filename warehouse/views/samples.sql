-- samples: the warehouse's `requests` rows with exactly the columns of
-- benchmaker.engine.records.SAMPLE_COLUMNS (no `shard`), so benchmaker/engine/sql/summary.sql runs
-- over every loaded run as it runs over one bundle's samples.jsonl.
CREATE OR REPLACE VIEW samples AS
SELECT
    run_id, seq, lane, stage, sweep_point, worker, phase, outcome, timeout_kind, error,
    http_status, intended_ns, sent_ns, first_byte_ns, first_token_ns, first_content_ns,
    end_ns, token_event_ns, token_event_tokens, n_token_events, usage_present,
    prompt_tokens, output_tokens, cached_tokens, reasoning_tokens, hidden_reasoning_tokens,
    usage_invalid_reason, output_chars,
    finish_reason, finish_class, refusal, bytes_sent, bytes_received, in_flight_at_send, slo_met, grade, meta
FROM requests;
