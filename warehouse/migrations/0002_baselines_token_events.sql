-- 0002: pinned baselines for v_nightly_regression, and the optional per-event table.

-- A pinned baseline per label: v_nightly_regression compares the latest run of a label
-- with this run instead of the previous run of that label.
CREATE TABLE IF NOT EXISTS baselines (
    label       VARCHAR PRIMARY KEY,
    run_id      VARCHAR NOT NULL,
    pinned_at   TIMESTAMP,          -- UTC
    note        VARCHAR
);

-- One row per token-bearing SSE event of a request (unnested token_event_ns /
-- token_event_tokens). Filled only when a load asks for it (load_run(token_events=True)):
-- it holds ~n_token_events rows per request.
CREATE TABLE IF NOT EXISTS token_events (
    run_id      VARCHAR NOT NULL,
    worker      INTEGER,
    seq         BIGINT,
    event_index INTEGER,            -- 0 = the first token event (t_ns = first_token_ns)
    t_ns        BIGINT,
    tokens      INTEGER             -- tokens carried by the event when the protocol says
);
