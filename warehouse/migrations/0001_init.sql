-- 0001_init: the base tables of the warehouse (docs/query-the-warehouse.md; the bundle: docs/architecture.md).
-- Every table carries run_id; a load deletes a run's rows and inserts them again in one
-- transaction (warehouse/loader.py). Time stamps named *_ns are integer ns offsets from
-- the run's t0 (perf_counter_ns on the client); *_at columns are UTC wall-clock times.

-- One row per run bundle: manifest.json (+ summary.json as loaded).
CREATE TABLE IF NOT EXISTS runs (
    run_id      VARCHAR PRIMARY KEY,
    kind        VARCHAR,
    label       VARCHAR,
    created_at  TIMESTAMP,          -- manifest created_at, converted to UTC
    t0_wall_ns  BIGINT,             -- time.time_ns() at the run's t0
    config      JSON,               -- resolved config, secrets redacted as "***"
    seed        BIGINT,
    versions    JSON,
    git_sha     VARCHAR,
    host        JSON,
    workers     INTEGER,
    slo         JSON,
    summary     JSON,               -- summary.json of the bundle, NULL when absent
    source_dir  VARCHAR,            -- bundle directory it was loaded from
    loaded_at   TIMESTAMP           -- UTC time of the load
);

-- One row per sweep point: sweep_points.jsonl when the bundle has it, else derived from
-- the sweep_point values seen in samples and episodes (concurrency from episodes).
CREATE TABLE IF NOT EXISTS sweep_points (
    run_id          VARCHAR NOT NULL,
    sweep_point     VARCHAR NOT NULL,
    concurrency     INTEGER,        -- target concurrency (episodes or requests in flight)
    rate_per_s      DOUBLE,         -- target arrival rate, open loop
    episodes        INTEGER,        -- episodes requested for the point
    started_ns      BIGINT,
    ended_ns        BIGINT,
    from_file       BOOLEAN NOT NULL -- true: a line of sweep_points.jsonl; false: derived
);

-- One row per lane seen in the samples or declared in config.lanes.
CREATE TABLE IF NOT EXISTS lanes (
    run_id      VARCHAR NOT NULL,
    lane        VARCHAR,            -- NULL when samples carried no lane
    n_requests  BIGINT NOT NULL,    -- samples of the lane (all phases, all outcomes)
    spec        JSON                -- the lane's entry of manifest config.lanes, if any
);

-- One row per request: benchmaker.engine.records.SAMPLE_COLUMNS, plus the shard it came from.
CREATE TABLE IF NOT EXISTS requests (
    run_id              VARCHAR NOT NULL,
    seq                 BIGINT,
    lane                VARCHAR,
    stage               VARCHAR,
    sweep_point         VARCHAR,
    worker              INTEGER,
    phase               VARCHAR,
    outcome             VARCHAR,
    timeout_kind        VARCHAR,
    error               VARCHAR,
    http_status         INTEGER,
    intended_ns         BIGINT,
    sent_ns             BIGINT,
    first_byte_ns       BIGINT,
    first_token_ns      BIGINT,
    first_content_ns    BIGINT,
    end_ns              BIGINT,
    token_event_ns      BIGINT[],
    token_event_tokens  INTEGER[],
    n_token_events      INTEGER,
    usage_present       BOOLEAN,
    prompt_tokens       BIGINT,
    output_tokens       BIGINT,
    cached_tokens       BIGINT,
    reasoning_tokens    BIGINT,
    output_chars        BIGINT,
    finish_reason       VARCHAR,
    bytes_sent          BIGINT,
    bytes_received      BIGINT,
    in_flight_at_send   INTEGER,
    slo_met             BOOLEAN,
    grade               VARCHAR,
    meta                JSON,
    shard               INTEGER NOT NULL -- k of samples-w<k>.jsonl; 0 for samples.jsonl
);

-- episodes.jsonl, one agent episode per row.
CREATE TABLE IF NOT EXISTS episodes (
    run_id              VARCHAR NOT NULL,
    sweep_point         VARCHAR,
    concurrency         INTEGER,
    episode_id          VARCHAR,
    trajectory_id       VARCHAR,
    task_id             VARCHAR,
    mode                VARCHAR,
    worker              INTEGER,
    started_ns          BIGINT,
    ended_ns            BIGINT,
    n_turns             INTEGER,
    n_requests          INTEGER,
    model_time_ns       BIGINT,
    tool_time_ns        BIGINT,
    first_token_ns_sum  BIGINT,
    misses_unknown_key  INTEGER,
    misses_beyond_turns INTEGER,
    misses_diverged     INTEGER,
    divergences         INTEGER,
    outcome             VARCHAR,
    error               VARCHAR,
    resolved            BOOLEAN,
    reverified          BOOLEAN,
    usage_complete      BOOLEAN,
    prompt_tokens       BIGINT,
    output_tokens       BIGINT,
    diff_sha256         VARCHAR
);

-- turns.jsonl, one model call of an episode per row.
CREATE TABLE IF NOT EXISTS turns (
    run_id          VARCHAR NOT NULL,
    sweep_point     VARCHAR,
    episode_id      VARCHAR,
    turn_index      INTEGER,
    sent_ns         BIGINT,
    first_token_ns  BIGINT,
    end_ns          BIGINT,
    outcome         VARCHAR,
    http_status     INTEGER,
    miss_kind       VARCHAR,
    prompt_tokens   BIGINT,
    output_tokens   BIGINT,
    cached_tokens   BIGINT,
    tool_time_ns    BIGINT,
    n_tool_calls    INTEGER,
    byte_equal      BOOLEAN
);

-- grades.jsonl.
CREATE TABLE IF NOT EXISTS grades (
    run_id      VARCHAR NOT NULL,
    sweep_point VARCHAR,
    episode_id  VARCHAR,
    seq         BIGINT,
    grader      VARCHAR,
    verdict     VARCHAR,
    score       DOUBLE,
    detail      VARCHAR
);

-- server_stats.json of the replay server (/stats), one row per file (per sweep point).
CREATE TABLE IF NOT EXISTS server_stats (
    run_id      VARCHAR NOT NULL,
    sweep_point VARCHAR,            -- from the points/<sweep_point>/ folder, NULL at top level
    stats       JSON                -- the file as written
);

-- monitor*.jsonl: time series scraped during the run (e.g. server /metrics).
CREATE TABLE IF NOT EXISTS monitor_samples (
    run_id      VARCHAR NOT NULL,
    sweep_point VARCHAR,
    name        VARCHAR,
    labels      JSON,
    t_ns        BIGINT,
    value       DOUBLE
);
