-- 0005: how each request's response ended: the class of its finish reason
-- (stop, length, tool_calls, content_filter, abort, error, cancelled, unknown; see
-- benchmaker/apis/generated.py) and whether its output was a refusal. Rows loaded before this
-- migration were not classified: finish_class stays NULL there, refusal NULL (unknown).
ALTER TABLE requests ADD COLUMN IF NOT EXISTS finish_class VARCHAR; -- NULL when no finish_reason was sent
ALTER TABLE requests ADD COLUMN IF NOT EXISTS refusal BOOLEAN;      -- output was (or held) a refusal
