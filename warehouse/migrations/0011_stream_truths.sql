-- 0011: what the stream showed and whether the server's token counts can be true
-- (benchmaker/apis/generated.py `settle`; docs/stream-rules.md). Rows loaded before this
-- migration were not checked: both stay NULL there (unknown).
ALTER TABLE requests ADD COLUMN IF NOT EXISTS hidden_reasoning_tokens BIGINT; -- usage reasoning tokens no delta showed
ALTER TABLE requests ADD COLUMN IF NOT EXISTS usage_invalid_reason VARCHAR;   -- why the counts cannot be true, NULL: they can
