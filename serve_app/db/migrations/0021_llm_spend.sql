-- memserve schema v21 (issue 31): every LLM call metered per tenant, end user, purpose,
-- model and UTC day; budgets read these counters (serve_app/store/llm_spend.py).
--
-- llm_calls: one row per call, inserted BEFORE the call (an intent that reserves its
-- estimated prompt tokens plus max_tokens against the budgets) and finished after it
-- in the same transaction that adds it to llm_usage_daily. A replica that dies between
-- the two leaves the intent open; any replica's reconciler later closes it as 'lost'
-- at its reservation. So a call that was paid for is counted at least once. Finished
-- rows are pruned after spend.raw_retention_days; the daily roll-up stays (bounded:
-- one row per tenant, user, day, purpose and model), pruned after daily_retention_days.
CREATE TABLE llm_calls (
    id              bigserial PRIMARY KEY,
    tenant_id       text NOT NULL,
    user_id         text NOT NULL DEFAULT '',   -- '' when the call is no end user's
    purpose         text NOT NULL CHECK (purpose IN
                        ('extract', 'summarize', 'consolidate', 'infer', 'chat')),
    grp             text NOT NULL CHECK (grp IN ('background', 'chat')),
    model           text NOT NULL,
    day             date NOT NULL,               -- UTC day the call started
    started_at      timestamptz NOT NULL DEFAULT now(),
    reserved        bigint NOT NULL,             -- estimated prompt + max_tokens
    est_prompt      bigint NOT NULL,
    finished_at     timestamptz,
    outcome         text,                        -- ok | <error kind> | lost
    prompt_tokens   bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    cached_tokens   bigint NOT NULL DEFAULT 0,
    estimated       boolean NOT NULL DEFAULT false,
    latency_ms      double precision NOT NULL DEFAULT 0
);
-- Open intents (budget reservations, the reconciler's work) and pruning.
CREATE INDEX llm_calls_open_idx ON llm_calls (tenant_id, grp) WHERE finished_at IS NULL;
CREATE INDEX llm_calls_started_idx ON llm_calls (started_at);

CREATE TABLE llm_usage_daily (
    tenant_id       text NOT NULL,
    user_id         text NOT NULL,
    day             date NOT NULL,
    purpose         text NOT NULL,
    grp             text NOT NULL,
    model           text NOT NULL,
    calls           bigint NOT NULL DEFAULT 0,
    errors          bigint NOT NULL DEFAULT 0,
    estimated_calls bigint NOT NULL DEFAULT 0,
    prompt_tokens   bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    cached_tokens   bigint NOT NULL DEFAULT 0,
    latency_ms      double precision NOT NULL DEFAULT 0,  -- sum: mean = latency_ms / calls
    PRIMARY KEY (tenant_id, day, grp, user_id, purpose, model)
);

-- Soft-threshold alerts already raised: once per (tenant, group, scope, window) across
-- all replicas (an INSERT ... ON CONFLICT DO NOTHING decides who logs it).
CREATE TABLE llm_budget_alerts (
    tenant_id   text NOT NULL,
    grp         text NOT NULL,
    scope       text NOT NULL,   -- tenant_daily | tenant_monthly | user_daily:<user>
    win         date NOT NULL,   -- the window's first day
    raised_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, grp, scope, win)
);
