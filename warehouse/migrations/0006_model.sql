-- 0006: the model that answered each call: a recorded trajectory
-- can switch models mid-run (a pi `model_change`), and the replay server answers each
-- turn under its own recorded name. `requests.model` is the `model` field of the
-- response as the server sent it (Sample.model); `turns.model` the same for an agent
-- episode's turn (TurnRecord.model). NULL: not reported (and for rows loaded before).
ALTER TABLE requests ADD COLUMN IF NOT EXISTS model VARCHAR; -- response `model`, NULL when the server sent none
ALTER TABLE turns ADD COLUMN IF NOT EXISTS model VARCHAR;    -- response `model` of the turn's model call
