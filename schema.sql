-- mcp-taskd database schema: the single source of truth.
--
-- src/tasks/sqlite/migrations.rs embeds this file and applies it at start-up. Each
-- block headed `-- migration N` runs once, in order, in its own transaction; `PRAGMA user_version`
-- records the last block applied. Foreign keys are off while a block runs (so a block may
-- rebuild a table that others reference) and checked before it commits. Never change the
-- SQL of a block that has shipped: add a new one.
--
-- Times are Unix milliseconds. Task contents (origin, arguments, results, input) are
-- sensitive: they are stored here and returned to their owner, never logged.

-- migration 1
CREATE TABLE tasks (
    id               TEXT PRIMARY KEY,          -- row key (or, before, ms time) + 128 CSPRNG bits (src/tasks/ids.rs)
    -- Authorization binding: every lookup and mutation matches all three.
    endpoint         TEXT NOT NULL,
    tenant           TEXT NOT NULL,
    principal        TEXT NOT NULL,
    tool             TEXT NOT NULL,
    -- Opaque origin (tool, validated arguments, protocol version, client capabilities):
    -- written once at creation, read back byte for byte by workers.
    origin           BLOB NOT NULL,
    status           TEXT NOT NULL
                     CHECK (status IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
    status_message   TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    ttl_ms           INTEGER,                   -- NULL: unlimited
    expires_at       INTEGER,                   -- created_at + ttl_ms
    poll_interval_ms INTEGER NOT NULL,
    result           TEXT,                      -- CallToolResult JSON, when completed
    error            TEXT,                      -- JSON-RPC error JSON, when failed
    input_requests   TEXT,                      -- outstanding InputRequests JSON, when input_required
    input_responses  TEXT NOT NULL DEFAULT '{}',-- every accepted response so far, by key
    tool_state       TEXT,                      -- the tool's own state between input rounds
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    idempotency_key  TEXT,
    version          INTEGER NOT NULL DEFAULT 1 -- +1 on every change
);
CREATE UNIQUE INDEX tasks_by_idempotency_key
    ON tasks (endpoint, tenant, principal, tool, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_by_expiry ON tasks (expires_at) WHERE expires_at IS NOT NULL;

-- Every input-request key a task has issued: keys are unique over a task's lifetime.
CREATE TABLE input_keys (
    task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    key     TEXT NOT NULL,
    PRIMARY KEY (task_id, key)
) WITHOUT ROWID;

-- The dispatch record of a non-terminal task. Deleted when the task ends.
CREATE TABLE jobs (
    task_id       TEXT PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    state         TEXT NOT NULL CHECK (state IN ('queued', 'running', 'waiting')),
    attempt       INTEGER NOT NULL DEFAULT 0,   -- attempts started
    max_attempts  INTEGER NOT NULL,
    backoff_ms    INTEGER NOT NULL,
    timeout_ms    INTEGER NOT NULL,
    run_after     INTEGER NOT NULL,             -- earliest claim
    lease_token   TEXT,                         -- fencing token of the current claim
    lease_expires INTEGER,
    deadline      INTEGER,                      -- hard deadline of the current attempt
    last_error    TEXT
);
CREATE INDEX jobs_ready ON jobs (run_after) WHERE state = 'queued';
CREATE INDEX jobs_leased ON jobs (lease_expires) WHERE state = 'running';

-- One row per attempt, for operators: when it ran and how it ended.
CREATE TABLE attempts (
    task_id    TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt    INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at   INTEGER,
    outcome    TEXT,
    PRIMARY KEY (task_id, attempt)
) WITHOUT ROWID;

-- Task changes, written in the same transaction as the change and relayed to the
-- in-process notification hub after commit; delivered rows are pruned.
CREATE TABLE outbox (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id    TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

-- migration 2
-- Cheaper writes, same data and columns as migration 1 (the tables are rebuilt):
-- - CHECK constraints list their values with OR: with an IN list of three or more,
--   SQLite built a temporary b-tree for every row it checked.
-- - jobs is WITHOUT ROWID: one b-tree keyed by task_id instead of a table and its index.
-- - outbox.seq has no AUTOINCREMENT, which rewrote the sqlite_sequence page in every
--   commit. seq still only grows: the janitor never prunes the newest row
--   (sql::prune_outbox), and a new row takes the largest seq plus one.
CREATE TABLE tasks_v2 (
    id               TEXT PRIMARY KEY,
    endpoint         TEXT NOT NULL,
    tenant           TEXT NOT NULL,
    principal        TEXT NOT NULL,
    tool             TEXT NOT NULL,
    origin           BLOB NOT NULL,
    status           TEXT NOT NULL
                     CHECK (status = 'working' OR status = 'input_required'
                            OR status = 'completed' OR status = 'failed'
                            OR status = 'cancelled'),
    status_message   TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    ttl_ms           INTEGER,
    expires_at       INTEGER,
    poll_interval_ms INTEGER NOT NULL,
    result           TEXT,
    error            TEXT,
    input_requests   TEXT,
    input_responses  TEXT NOT NULL DEFAULT '{}',
    tool_state       TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    idempotency_key  TEXT,
    version          INTEGER NOT NULL DEFAULT 1
);
INSERT INTO tasks_v2 (id, endpoint, tenant, principal, tool, origin, status,
        status_message, created_at, updated_at, ttl_ms, expires_at, poll_interval_ms,
        result, error, input_requests, input_responses, tool_state, cancel_requested,
        idempotency_key, version)
    SELECT id, endpoint, tenant, principal, tool, origin, status,
        status_message, created_at, updated_at, ttl_ms, expires_at, poll_interval_ms,
        result, error, input_requests, input_responses, tool_state, cancel_requested,
        idempotency_key, version
    FROM tasks;
DROP TABLE tasks;
ALTER TABLE tasks_v2 RENAME TO tasks;
CREATE UNIQUE INDEX tasks_by_idempotency_key
    ON tasks (endpoint, tenant, principal, tool, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_by_expiry ON tasks (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE jobs_v2 (
    task_id       TEXT PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    state         TEXT NOT NULL
                  CHECK (state = 'queued' OR state = 'running' OR state = 'waiting'),
    attempt       INTEGER NOT NULL DEFAULT 0,
    max_attempts  INTEGER NOT NULL,
    backoff_ms    INTEGER NOT NULL,
    timeout_ms    INTEGER NOT NULL,
    run_after     INTEGER NOT NULL,
    lease_token   TEXT,
    lease_expires INTEGER,
    deadline      INTEGER,
    last_error    TEXT
) WITHOUT ROWID;
INSERT INTO jobs_v2 (task_id, state, attempt, max_attempts, backoff_ms, timeout_ms,
        run_after, lease_token, lease_expires, deadline, last_error)
    SELECT task_id, state, attempt, max_attempts, backoff_ms, timeout_ms,
        run_after, lease_token, lease_expires, deadline, last_error
    FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_v2 RENAME TO jobs;
CREATE INDEX jobs_ready ON jobs (run_after) WHERE state = 'queued';
CREATE INDEX jobs_leased ON jobs (lease_expires) WHERE state = 'running';

CREATE TABLE outbox_v2 (
    seq        INTEGER PRIMARY KEY,
    task_id    TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
INSERT INTO outbox_v2 (seq, task_id, created_at)
    SELECT seq, task_id, created_at FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_v2 RENAME TO outbox;

-- migration 3
-- Fair workers: each job names its tool, so that a claim can pass over every queued
-- job of a tool at its `max_concurrency` with one index seek instead of reading them
-- (sql::attempts::claim walks jobs_queued_by_tool one tool at a time).
ALTER TABLE jobs ADD COLUMN tool TEXT NOT NULL DEFAULT '';
UPDATE jobs SET tool = (SELECT tool FROM tasks WHERE tasks.id = jobs.task_id);
CREATE INDEX jobs_queued_by_tool ON jobs (tool, run_after) WHERE state = 'queued';
-- Idempotency keys are per identity, across tools, and remember what they were used
-- for: arguments_digest is the SHA-256 of the task's canonical arguments (NULL for keys
-- stored before this migration: their digest is computed from `origin` when needed).
-- The index is not UNIQUE: keys stored per tool before may repeat across tools. The
-- single writer checks the key before every keyed insert, which keeps new keys unique.
ALTER TABLE tasks ADD COLUMN arguments_digest BLOB;
DROP INDEX tasks_by_idempotency_key;
CREATE INDEX tasks_by_idempotency_key
    ON tasks (endpoint, tenant, principal, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- migration 4
-- Counts kept by triggers, so that /metrics and `mcp-taskd stats` read a few rows
-- instead of counting the tasks and jobs tables (a GROUP BY over 10 million tasks takes
-- ~0.5 s). The triggers run inside the transaction that changes the row, so the counts
-- are exactly as durable as the rows: a crash (kill -9, power loss) loses or keeps both
-- together. A later migration that rebuilds `tasks` or `jobs` (DROP TABLE, RENAME)
-- drops their triggers too: it must create them again.
--
-- task_counts: tasks stored now, by tool and status (a gauge; TTL deletions decrement).
CREATE TABLE task_counts (
    tool   TEXT NOT NULL,
    status TEXT NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (tool, status)
) WITHOUT ROWID;
INSERT INTO task_counts (tool, status, n)
    SELECT tool, status, COUNT(*) FROM tasks GROUP BY tool, status;
-- task_totals: tasks created, and tasks that reached each terminal status, by tool,
-- since the database was created (counters: deletions never decrement them). Seeded
-- from the tasks still stored: the ones deleted before this migration are not counted.
CREATE TABLE task_totals (
    tool      TEXT PRIMARY KEY,
    created   INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    failed    INTEGER NOT NULL DEFAULT 0,
    cancelled INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
INSERT INTO task_totals (tool, created, completed, failed, cancelled)
    SELECT tool, COUNT(*), SUM(status = 'completed'), SUM(status = 'failed'),
           SUM(status = 'cancelled')
    FROM tasks GROUP BY tool;
-- job_counts: jobs by state; `queued` is the queue depth.
CREATE TABLE job_counts (
    state TEXT PRIMARY KEY,
    n     INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO job_counts (state, n)
    SELECT state, COUNT(*) FROM jobs GROUP BY state;

CREATE TRIGGER tasks_counted_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO task_counts (tool, status, n) VALUES (NEW.tool, NEW.status, 1)
        ON CONFLICT (tool, status) DO UPDATE SET n = n + 1;
    INSERT INTO task_totals (tool, created, completed, failed, cancelled)
        VALUES (NEW.tool, 1, NEW.status = 'completed', NEW.status = 'failed',
                NEW.status = 'cancelled')
        ON CONFLICT (tool) DO UPDATE SET created = created + 1,
            completed = completed + excluded.completed, failed = failed + excluded.failed,
            cancelled = cancelled + excluded.cancelled;
END;
CREATE TRIGGER tasks_counted_status AFTER UPDATE OF status ON tasks
    WHEN OLD.status IS NOT NEW.status
BEGIN
    UPDATE task_counts SET n = n - 1 WHERE tool = OLD.tool AND status = OLD.status;
    INSERT INTO task_counts (tool, status, n) VALUES (NEW.tool, NEW.status, 1)
        ON CONFLICT (tool, status) DO UPDATE SET n = n + 1;
    UPDATE task_totals SET completed = completed + (NEW.status = 'completed'),
        failed = failed + (NEW.status = 'failed'),
        cancelled = cancelled + (NEW.status = 'cancelled')
        WHERE tool = NEW.tool
        AND (NEW.status = 'completed' OR NEW.status = 'failed'
             OR NEW.status = 'cancelled');
END;
CREATE TRIGGER tasks_counted_delete AFTER DELETE ON tasks BEGIN
    UPDATE task_counts SET n = n - 1 WHERE tool = OLD.tool AND status = OLD.status;
END;
CREATE TRIGGER jobs_counted_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO job_counts (state, n) VALUES (NEW.state, 1)
        ON CONFLICT (state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER jobs_counted_state AFTER UPDATE OF state ON jobs
    WHEN OLD.state IS NOT NEW.state
BEGIN
    UPDATE job_counts SET n = n - 1 WHERE state = OLD.state;
    INSERT INTO job_counts (state, n) VALUES (NEW.state, 1)
        ON CONFLICT (state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER jobs_counted_delete AFTER DELETE ON jobs BEGIN
    UPDATE job_counts SET n = n - 1 WHERE state = OLD.state;
END;


-- migration 5
-- The counting triggers of migration 4, the same counts, rewritten so that the
-- statements firing them need no statement journal. An UPSERT's DO UPDATE part may
-- ABORT whatever the statement's own conflict clause says, and SQLite then gives every
-- statement that fires the trigger its own sub-journal: a copy of each page the
-- statement changes, taken and freed again per statement. Here a missing count row is
-- inserted with DO NOTHING and then updated, and every step says OR FAIL, so that no
-- step can ask for that rollback. (Not INSERT ... SELECT ... WHERE NOT EXISTS: a
-- SELECT that reads the table it inserts into goes through a temporary table, opened
-- and closed on every run.) Their caller rolls back instead: every write the server
-- makes runs under a savepoint of the writer's transaction (src/tasks/sqlite/writer),
-- which undoes a failed write whole. The steps cannot fail on a constraint in
-- practice: the count tables have no CHECK, and every value written is computed,
-- never NULL.
DROP TRIGGER tasks_counted_insert;
DROP TRIGGER tasks_counted_status;
DROP TRIGGER tasks_counted_delete;
DROP TRIGGER jobs_counted_insert;
DROP TRIGGER jobs_counted_state;
DROP TRIGGER jobs_counted_delete;
CREATE TRIGGER tasks_counted_insert AFTER INSERT ON tasks BEGIN
    INSERT OR FAIL INTO task_counts (tool, status, n) VALUES (NEW.tool, NEW.status, 0)
        ON CONFLICT (tool, status) DO NOTHING;
    UPDATE OR FAIL task_counts SET n = n + 1 WHERE tool = NEW.tool AND status = NEW.status;
    INSERT OR FAIL INTO task_totals (tool) VALUES (NEW.tool) ON CONFLICT (tool) DO NOTHING;
    UPDATE OR FAIL task_totals SET created = created + 1,
        completed = completed + (NEW.status = 'completed'),
        failed = failed + (NEW.status = 'failed'),
        cancelled = cancelled + (NEW.status = 'cancelled')
        WHERE tool = NEW.tool;
END;
CREATE TRIGGER tasks_counted_status AFTER UPDATE OF status ON tasks
    WHEN OLD.status IS NOT NEW.status
BEGIN
    UPDATE OR FAIL task_counts SET n = n - 1 WHERE tool = OLD.tool AND status = OLD.status;
    INSERT OR FAIL INTO task_counts (tool, status, n) VALUES (NEW.tool, NEW.status, 0)
        ON CONFLICT (tool, status) DO NOTHING;
    UPDATE OR FAIL task_counts SET n = n + 1 WHERE tool = NEW.tool AND status = NEW.status;
    UPDATE OR FAIL task_totals SET completed = completed + (NEW.status = 'completed'),
        failed = failed + (NEW.status = 'failed'),
        cancelled = cancelled + (NEW.status = 'cancelled')
        WHERE tool = NEW.tool
        AND (NEW.status = 'completed' OR NEW.status = 'failed'
             OR NEW.status = 'cancelled');
END;
CREATE TRIGGER tasks_counted_delete AFTER DELETE ON tasks BEGIN
    UPDATE OR FAIL task_counts SET n = n - 1 WHERE tool = OLD.tool AND status = OLD.status;
END;
-- job_counts holds a row for each state a job can be in (the CHECK of jobs.state), so
-- that its triggers only update. A state added later needs its row added too.
INSERT OR IGNORE INTO job_counts (state, n) VALUES ('queued', 0), ('running', 0), ('waiting', 0);
CREATE TRIGGER jobs_counted_insert AFTER INSERT ON jobs BEGIN
    UPDATE OR FAIL job_counts SET n = n + 1 WHERE state = NEW.state;
END;
CREATE TRIGGER jobs_counted_state AFTER UPDATE OF state ON jobs
    WHEN OLD.state IS NOT NEW.state
BEGIN
    UPDATE OR FAIL job_counts SET n = n - 1 WHERE state = OLD.state;
    UPDATE OR FAIL job_counts SET n = n + 1 WHERE state = NEW.state;
END;
CREATE TRIGGER jobs_counted_delete AFTER DELETE ON jobs BEGIN
    UPDATE OR FAIL job_counts SET n = n - 1 WHERE state = OLD.state;
END;

-- migration 6
-- OAuth identities: the issuer that vouched for a task's principal is part of its
-- authorization binding (src/auth.rs, Identity), so that two authorization servers'
-- subjects, or a static token's principal, never reach each other's tasks. Empty for
-- static tokens and anonymous callers, which is what every task stored before was.
-- Lookups match it beside endpoint, tenant and principal; the idempotency index needs
-- no change (the issuer only narrows the rows that index finds).
ALTER TABLE tasks ADD COLUMN issuer TEXT NOT NULL DEFAULT '';

-- migration 7
-- The W3C trace context a task was created in (issue 33): its `traceparent`, then a
-- space and its `tracestate` when there is one; NULL when the caller sent none and
-- telemetry is off. Every span of the task's life joins this context, in whichever
-- process or node runs it and after any restart; command tools see it as TRACEPARENT
-- and TRACESTATE. A trace id is not task content: it is fine in logs and dashboards.
ALTER TABLE tasks ADD COLUMN trace_context TEXT;

-- migration 8
-- Fair claiming (issue 29; src/tasks/model.rs, TURN). Claims took the oldest ready job
-- across everyone, so one identity's backlog of a tool held every other identity's
-- jobs of that tool behind it. Now each ready job holds a `turn`, and a claim takes the
-- job of the highest `priority`, then of the smallest turn, then the oldest: one seek in
-- jobs_turns, whatever the number of identities. A new job takes its identity's next
-- turn at its priority (sql::turns): `stride` after the identity's last queued job
-- there (jobs_turns_by_owner), never before the first turn queued there (jobs_turns).
-- - owner: the job's identity, every field length-prefixed (auth::Identity::key).
-- - stride: TURN divided by the identity's weight when the job was created.
-- - turn NULL: the job waits for its turn until `run_after` passes (a retry in its
--   backoff, and the jobs queued before this migration); claims give due jobs their
--   turns first, in `run_after` order (jobs_due), so that a waiting job is never among
--   the jobs a claim reads past.
-- jobs_ready stays: it finds the oldest ready job for /metrics.
ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN stride INTEGER NOT NULL DEFAULT 1048576;
ALTER TABLE jobs ADD COLUMN turn INTEGER;
UPDATE jobs SET owner = (
    SELECT length(endpoint) || ':' || endpoint || length(issuer) || ':' || issuer
           || length(tenant) || ':' || tenant || length(principal) || ':' || principal
    FROM tasks WHERE tasks.id = jobs.task_id);
DROP INDEX jobs_queued_by_tool;
CREATE INDEX jobs_turns ON jobs (priority DESC, turn)
    WHERE state = 'queued' AND turn IS NOT NULL;
CREATE INDEX jobs_turns_by_tool ON jobs (tool, priority DESC, turn)
    WHERE state = 'queued' AND turn IS NOT NULL;
CREATE INDEX jobs_turns_by_owner ON jobs (owner, priority, turn)
    WHERE state = 'queued' AND turn IS NOT NULL;
CREATE INDEX jobs_due ON jobs (run_after) WHERE state = 'queued' AND turn IS NULL;

-- migration 9
-- Per-identity quota of tasks not yet terminal (issue 29; src/shares.rs): a task has a
-- job exactly until it is terminal, so counting an identity's jobs by owner counts its
-- queued, working and input_required tasks, from the store (a restart changes nothing).
-- The count stops at the quota (LIMIT), so it reads at most that many index entries.
CREATE INDEX jobs_by_owner ON jobs (owner);

-- migration 10
-- One index by owner instead of two (issue 29: fair claiming cost a drain of quick jobs
-- a fifth of its rate). jobs_turns_by_owner (owner, priority, turn), partial on queued
-- jobs, was written at each job's creation and again at its claim; jobs_by_owner
-- (owner) at its creation and its end. Now jobs_by_owner (owner, priority, turn) holds
-- every job: written at creation and at the end (and when a retry gets its turn), not
-- at the claim. It serves both reads:
-- - the quota's count of an identity's jobs (sql::upkeep::live_tasks), by its prefix;
-- - an identity's last turn at a priority (sql::turns, LAST): now the last of its jobs
--   queued *or in service*. That is start-time fair queuing as written (a flow's next
--   start is after the finish of its previous packet, whether that is queued or being
--   sent): an identity whose job was just claimed starts its next one a stride later,
--   not at the head of the queue again.
DROP INDEX jobs_turns_by_owner;
DROP INDEX jobs_by_owner;
CREATE INDEX jobs_by_owner ON jobs (owner, priority, turn);

-- migration 11
-- Legacy sessions (issue 28; tasks::sqlite::sql::sessions, legacy::sessions): written
-- when `initialize` opens one and when its state changes, read by a server that does
-- not hold the session in memory (it restarted), so that a restart ends no client's
-- session. owner is the identity it is bound to (auth::Identity::key), never a
-- credential; last_used is recorded lazily (at most once a minute a session), and
-- sessions idle past `sessions.idle_timeout_ms` are swept a hundred at a time.
CREATE TABLE sessions (
    id            TEXT PRIMARY KEY,
    owner         TEXT NOT NULL,
    version       TEXT NOT NULL,
    capabilities  TEXT NOT NULL,
    client_info   TEXT NOT NULL,
    log_level     TEXT,
    subscriptions TEXT NOT NULL,
    followed      TEXT NOT NULL,
    last_used     INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX sessions_last_used ON sessions (last_used);

-- migration 12
-- Each identity's place in the queue in a small table instead of an index over every
-- job (issue 29: draining 1,000 identities' jobs ran at 0.73x of one identity's).
-- jobs_by_owner (owner, priority, turn) held an entry per job, deleted at each job's
-- end: with one identity those entries sit together, but jobs of 1,000 identities end
-- in turn (round robin), so each batch of ends dirtied a page of that index per job,
-- and each commit wrote that many more WAL pages. identity_queue holds one row per
-- identity and priority (a few pages for 1,000 identities), kept by triggers:
-- - jobs: its jobs (queued, running, waiting: its tasks not yet terminal), which the
--   quota reads in one row (sql::upkeep::live_tasks);
-- - last_turn: the last turn it was given there (sql::turns), at creation, or when a
--   retry or an answered task gets its turn back. Turns are taken in order, so once an
--   identity's jobs are all gone its last turn is behind the head of the queue, where
--   its next job starts anyway; such rows (jobs = 0) are pruned by upkeep.
-- SQLite's max() of NULL is NULL, hence coalesce: a job queued without a turn (a retry
-- waiting for its backoff) leaves last_turn as it was.
CREATE TABLE identity_queue (
    owner     TEXT NOT NULL,
    priority  INTEGER NOT NULL,
    jobs      INTEGER NOT NULL,
    last_turn INTEGER,
    PRIMARY KEY (owner, priority)
) WITHOUT ROWID;
INSERT INTO identity_queue (owner, priority, jobs, last_turn)
    SELECT owner, priority, COUNT(*), MAX(turn) FROM jobs GROUP BY owner, priority;
CREATE TRIGGER identity_queue_job_in AFTER INSERT ON jobs BEGIN
    INSERT INTO identity_queue (owner, priority, jobs, last_turn)
        VALUES (NEW.owner, NEW.priority, 1, NEW.turn)
        ON CONFLICT (owner, priority) DO UPDATE SET
            jobs = jobs + 1,
            last_turn = max(coalesce(last_turn, NEW.turn), coalesce(NEW.turn, last_turn));
END;
CREATE TRIGGER identity_queue_job_out AFTER DELETE ON jobs BEGIN
    UPDATE identity_queue SET jobs = jobs - 1
        WHERE owner = OLD.owner AND priority = OLD.priority;
END;
CREATE TRIGGER identity_queue_turn AFTER UPDATE OF turn ON jobs
    WHEN NEW.turn IS NOT NULL BEGIN
    UPDATE identity_queue SET last_turn = max(coalesce(last_turn, NEW.turn), NEW.turn)
        WHERE owner = NEW.owner AND priority = NEW.priority;
END;
DROP INDEX jobs_by_owner;

-- migration 13
-- identity_queue's triggers (migration 12) written as migration 5 wrote the counting
-- triggers: every step OR FAIL, and the upsert as an INSERT ... DO NOTHING and an
-- UPDATE. With ABORT steps, every statement that fires them (each job's insert, its
-- delete at the task's end, a retry's turn) got a statement journal of its own.
DROP TRIGGER identity_queue_job_in;
DROP TRIGGER identity_queue_job_out;
DROP TRIGGER identity_queue_turn;
CREATE TRIGGER identity_queue_job_in AFTER INSERT ON jobs BEGIN
    INSERT OR FAIL INTO identity_queue (owner, priority, jobs, last_turn)
        VALUES (NEW.owner, NEW.priority, 0, NEW.turn)
        ON CONFLICT (owner, priority) DO NOTHING;
    UPDATE OR FAIL identity_queue SET jobs = jobs + 1,
        last_turn = max(coalesce(last_turn, NEW.turn), coalesce(NEW.turn, last_turn))
        WHERE owner = NEW.owner AND priority = NEW.priority;
END;
CREATE TRIGGER identity_queue_job_out AFTER DELETE ON jobs BEGIN
    UPDATE OR FAIL identity_queue SET jobs = jobs - 1
        WHERE owner = OLD.owner AND priority = OLD.priority;
END;
CREATE TRIGGER identity_queue_turn AFTER UPDATE OF turn ON jobs
    WHEN NEW.turn IS NOT NULL BEGIN
    UPDATE OR FAIL identity_queue SET last_turn = max(coalesce(last_turn, NEW.turn), NEW.turn)
        WHERE owner = NEW.owner AND priority = NEW.priority;
END;

-- migration 14
-- A task's output (issue 47): the lines its attempts wrote (a command tool's stderr and
-- its stdout beyond the protocol, status and log messages), in the order written. At
-- most a cap of bytes is kept per task, the newest; `task_output_totals` counts what
-- was kept and dropped and where the next line goes, so an append touches one row of
-- it instead of summing the task's lines. Both go with their task.
CREATE TABLE task_output (
    task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    at_ms   INTEGER NOT NULL,
    stream  TEXT NOT NULL,
    line    TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;
CREATE TABLE task_output_totals (
    task_id    TEXT PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    next_seq   INTEGER NOT NULL,
    kept_bytes INTEGER NOT NULL,
    dropped    INTEGER NOT NULL
) WITHOUT ROWID;

-- migration 15
-- Flow control (issue 48; the scheme is told at crates/engine/src/flow.rs).
-- Concurrency keys: a job of a keyed tool carries its gate (the tool and the key's
-- value), how messages name the key, and the gate's limit. Its *places* are its
-- admitted jobs (held = 0, queued or running: not those waiting for input) and the
-- inline calls holding one (gate_holds). A job the gate cannot admit is held (held = 1):
-- no turn, not due (jobs_due leaves it out), never seen by a claim. The triggers below
-- admit the oldest held jobs of a gate, as far as its limit allows (the newest held
-- job's: the configuration in force), whenever a place is
-- given back: an admitted job's task ends (its job row goes) or waits for input, or an
-- inline call lets go. An admitted job joins the queue as a retry whose backoff has
-- passed (turn NULL, due now: sql::turns gives it its turn). A job answered after
-- waiting for input is held again when its gate is full or an older job of it is held.
-- Triggers, not the code that ends jobs: no path (a cancel, an expiry, a reclaim) can
-- forget to hand its place on. Every step OR FAIL (see migration 5).
ALTER TABLE jobs ADD COLUMN gate TEXT;
ALTER TABLE jobs ADD COLUMN gate_label TEXT;
ALTER TABLE jobs ADD COLUMN gate_limit INTEGER;
ALTER TABLE jobs ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_gates ON jobs (gate, held, task_id) WHERE gate IS NOT NULL;
DROP INDEX jobs_due;
CREATE INDEX jobs_due ON jobs (run_after) WHERE state = 'queued' AND turn IS NULL AND held = 0;
CREATE TABLE gate_holds (
    gate       TEXT NOT NULL,
    holder     TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (gate, holder)
) WITHOUT ROWID;
CREATE INDEX gate_holds_expiry ON gate_holds (expires_at);
CREATE TRIGGER jobs_gate_place_freed AFTER DELETE ON jobs
    WHEN OLD.gate IS NOT NULL AND OLD.held = 0 AND OLD.state <> 'waiting' BEGIN
    UPDATE OR FAIL jobs SET held = 0 WHERE task_id IN (
        SELECT task_id FROM jobs WHERE gate = OLD.gate AND held = 1 ORDER BY task_id
        LIMIT max(0, coalesce((SELECT gate_limit FROM jobs WHERE gate = OLD.gate AND held = 1
                               ORDER BY task_id DESC LIMIT 1), 0)
            - (SELECT count(*) FROM jobs WHERE gate = OLD.gate AND held = 0
               AND state <> 'waiting')
            - (SELECT count(*) FROM gate_holds WHERE gate = OLD.gate)));
END;
CREATE TRIGGER jobs_gate_place_left AFTER UPDATE OF state ON jobs
    WHEN NEW.gate IS NOT NULL AND NEW.held = 0 AND OLD.state <> 'waiting'
        AND NEW.state = 'waiting' BEGIN
    UPDATE OR FAIL jobs SET held = 0 WHERE task_id IN (
        SELECT task_id FROM jobs WHERE gate = NEW.gate AND held = 1 ORDER BY task_id
        LIMIT max(0, coalesce((SELECT gate_limit FROM jobs WHERE gate = NEW.gate AND held = 1
                               ORDER BY task_id DESC LIMIT 1), 0)
            - (SELECT count(*) FROM jobs WHERE gate = NEW.gate AND held = 0
               AND state <> 'waiting')
            - (SELECT count(*) FROM gate_holds WHERE gate = NEW.gate)));
END;
CREATE TRIGGER gate_holds_place_freed AFTER DELETE ON gate_holds BEGIN
    UPDATE OR FAIL jobs SET held = 0 WHERE task_id IN (
        SELECT task_id FROM jobs WHERE gate = OLD.gate AND held = 1 ORDER BY task_id
        LIMIT max(0, coalesce((SELECT gate_limit FROM jobs WHERE gate = OLD.gate AND held = 1
                               ORDER BY task_id DESC LIMIT 1), 0)
            - (SELECT count(*) FROM jobs WHERE gate = OLD.gate AND held = 0
               AND state <> 'waiting')
            - (SELECT count(*) FROM gate_holds WHERE gate = OLD.gate)));
END;
CREATE TRIGGER jobs_gate_rejoined AFTER UPDATE OF state ON jobs
    WHEN NEW.gate IS NOT NULL AND NEW.held = 0 AND OLD.state = 'waiting'
        AND NEW.state = 'queued'
        AND ((SELECT count(*) FROM jobs WHERE gate = NEW.gate AND held = 0
              AND state <> 'waiting' AND task_id <> NEW.task_id)
             + (SELECT count(*) FROM gate_holds WHERE gate = NEW.gate) >= NEW.gate_limit
            OR EXISTS (SELECT 1 FROM jobs WHERE gate = NEW.gate AND held = 1
                       AND task_id < NEW.task_id)) BEGIN
    UPDATE OR FAIL jobs SET held = 1, turn = NULL WHERE task_id = NEW.task_id;
END;
-- Rates: one token bucket per rate-limited tool (or tool and key), with the rate it
-- was last used under (so that tasks/get can say when the next token comes).
CREATE TABLE rate_buckets (
    bucket     TEXT PRIMARY KEY,
    tokens     REAL NOT NULL,
    updated_at INTEGER NOT NULL,
    per_ms     REAL NOT NULL,
    burst      REAL NOT NULL
) WITHOUT ROWID;
-- Paused tools: claims pass their queued jobs over.
CREATE TABLE tool_pauses (
    tool      TEXT PRIMARY KEY,
    reason    TEXT NOT NULL,
    paused_at INTEGER NOT NULL
) WITHOUT ROWID;

-- migration 16
-- Webhooks (issue 49; crates/engine/src/webhooks.rs, crates/webhooks/). webhook_routes
-- holds what the configured webhooks want (written at start-up and by reloads; '*'
-- matches any tool, tenant or principal). The triggers below insert, in the
-- transaction of the task's change, one pending delivery per webhook a route of which
-- matches it: `task.created` at the insert (and the task's status event, should it be
-- inserted in another status), `task.<status>` when the status becomes completed,
-- failed, cancelled or input_required. Without routes they stop at the EXISTS. A
-- delivery is pending until delivered or given up (dead), and a pending one is due
-- once `next_at` has passed: 0 at first, then the time of its next retry. `id` is the
-- `webhook-id` header, the same on every attempt. Deliveries of one webhook and task go
-- out in `seq` order, one at a time (webhook_deliveries_by_task). Every step OR FAIL
-- (see migration 5).
CREATE TABLE webhook_routes (
    event     TEXT NOT NULL,
    webhook   TEXT NOT NULL,
    tool      TEXT NOT NULL,
    tenant    TEXT NOT NULL,
    principal TEXT NOT NULL,
    PRIMARY KEY (event, webhook, tool, tenant, principal)
) WITHOUT ROWID;
CREATE TABLE webhook_deliveries (
    seq         INTEGER PRIMARY KEY,
    webhook     TEXT NOT NULL,
    id          TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    event       TEXT NOT NULL,
    tool        TEXT NOT NULL,
    status      TEXT NOT NULL,
    at_ms       INTEGER NOT NULL,
    since       INTEGER NOT NULL,
    state       TEXT NOT NULL DEFAULT 'pending',
    attempts    INTEGER NOT NULL DEFAULT 0,
    next_at     INTEGER NOT NULL DEFAULT 0,
    holder      TEXT,
    done_at     INTEGER,
    last_status INTEGER,
    last_error  TEXT
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (webhook, next_at, seq)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_by_task ON webhook_deliveries (webhook, task_id, seq)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_done ON webhook_deliveries (done_at) WHERE state <> 'pending';
CREATE TRIGGER tasks_webhook_created AFTER INSERT ON tasks
    WHEN EXISTS (SELECT 1 FROM webhook_routes) BEGIN
    INSERT OR FAIL INTO webhook_deliveries (webhook, id, task_id, event, tool, status, at_ms, since)
        SELECT webhook, 'msg_' || lower(hex(randomblob(16))), NEW.id, event, NEW.tool,
               NEW.status, NEW.updated_at, NEW.updated_at
        FROM webhook_routes WHERE event = 'task.created' AND tool IN ('*', NEW.tool)
            AND tenant IN ('*', NEW.tenant) AND principal IN ('*', NEW.principal)
        GROUP BY webhook;
    INSERT OR FAIL INTO webhook_deliveries (webhook, id, task_id, event, tool, status, at_ms, since)
        SELECT webhook, 'msg_' || lower(hex(randomblob(16))), NEW.id, event, NEW.tool,
               NEW.status, NEW.updated_at, NEW.updated_at
        FROM webhook_routes WHERE NEW.status <> 'working' AND event = 'task.' || NEW.status
            AND tool IN ('*', NEW.tool) AND tenant IN ('*', NEW.tenant)
            AND principal IN ('*', NEW.principal)
        GROUP BY webhook;
END;
CREATE TRIGGER tasks_webhook_status AFTER UPDATE OF status ON tasks
    WHEN OLD.status IS NOT NEW.status AND NEW.status <> 'working'
        AND EXISTS (SELECT 1 FROM webhook_routes) BEGIN
    INSERT OR FAIL INTO webhook_deliveries (webhook, id, task_id, event, tool, status, at_ms, since)
        SELECT webhook, 'msg_' || lower(hex(randomblob(16))), NEW.id, event, NEW.tool,
               NEW.status, NEW.updated_at, NEW.updated_at
        FROM webhook_routes WHERE event = 'task.' || NEW.status AND tool IN ('*', NEW.tool)
            AND tenant IN ('*', NEW.tenant) AND principal IN ('*', NEW.principal)
        GROUP BY webhook;
END;

-- migration 17
-- Schedules (issue 49; crates/engine/src/schedules/). A task a schedule started names
-- its schedule and its slot's time (Unix ms); the unique index is what makes a slot
-- start one task at most, whatever restarts or crashes happen around it. Tasks of no
-- schedule (NULL) are not in it. schedule_marks holds one row per schedule: the last
-- slot it reached, what became of it (created, caught_up, skipped, missed, refused), its
-- newest task, and its counts; a scheduler goes on after that slot. Written in the same
-- transaction as the slot's task, or alone when a slot starts none.
ALTER TABLE tasks ADD COLUMN schedule TEXT;
ALTER TABLE tasks ADD COLUMN schedule_slot INTEGER;
CREATE UNIQUE INDEX tasks_by_schedule_slot ON tasks (schedule, schedule_slot)
    WHERE schedule IS NOT NULL;
CREATE TABLE schedule_marks (
    schedule TEXT PRIMARY KEY,
    slot     INTEGER NOT NULL,
    outcome  TEXT NOT NULL,
    at       INTEGER NOT NULL,
    task_id  TEXT,
    created  INTEGER NOT NULL DEFAULT 0,
    skipped  INTEGER NOT NULL DEFAULT 0,
    missed   INTEGER NOT NULL DEFAULT 0,
    refused  INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- migration 18
-- Retention by outcome (issue 48; crates/engine/src/history.rs).
-- rerun_of: the task an operator's rerun repeats (`mcp-taskd tasks rerun`), written at
-- the rerun's creation.
-- task_history: the operator's summary of a finished task, written by the janitor in
-- the transaction that deletes the task past its TTL (sql::history::expire), kept
-- until keep_until (the task's end plus `[history]`'s duration for its status), then
-- pruned a batch at a time (task_history_expiry). Its tool, identity, status, times,
-- error, number of attempts, rerun link and schedule slot; never its result or output; its origin
-- (arguments) only with `[history] keep_arguments`. Read by operators only.
ALTER TABLE tasks ADD COLUMN rerun_of TEXT;
CREATE TABLE task_history (
    id             TEXT PRIMARY KEY,
    tool           TEXT NOT NULL,
    endpoint       TEXT NOT NULL,
    issuer         TEXT NOT NULL,
    tenant         TEXT NOT NULL,
    principal      TEXT NOT NULL,
    status         TEXT NOT NULL,
    status_message TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    removed_at     INTEGER NOT NULL,
    keep_until     INTEGER NOT NULL,
    error          TEXT,
    attempts       INTEGER NOT NULL,
    rerun_of       TEXT,
    schedule       TEXT,
    schedule_slot  INTEGER,
    origin         BLOB
);
CREATE INDEX task_history_expiry ON task_history (keep_until);

-- migration 19
-- A task's output one row per batch (issue 47; measured in docs/benchmarks/output.md).
-- Migration 14 kept a row per line, and a totals row rewritten at every write: a task
-- printing ten lines cost eleven row writes, and with its last batch written apart
-- from its outcome, a second commit; command-tool throughput fell to 0.69x of the build
-- before. Now each batch an attempt writes (every 250 ms at most while it runs, and the
-- last one in its outcome's write) is one row: the position of its first line, how many
-- lines, their bytes, and the lines themselves (a JSON array of [at_ms, stream, text]);
-- the newest row also holds the task's totals (bytes kept, lines dropped). Trimming to
-- the cap deletes the oldest rows and cuts the oldest one kept to its newest lines
-- (sql::output). The lines kept so far become rows of one line each.
CREATE TABLE task_output_batches (
    task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    lines   INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    bytes   INTEGER NOT NULL,
    kept    INTEGER NOT NULL,
    dropped INTEGER NOT NULL,
    body    TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;
INSERT INTO task_output_batches
    SELECT o.task_id, o.seq, 1, o.attempt, length(CAST(o.line AS BLOB)), t.kept_bytes,
        t.dropped, json_array(json_array(o.at_ms, o.stream, o.line))
    FROM task_output AS o JOIN task_output_totals AS t ON t.task_id = o.task_id;
DROP TABLE task_output;
DROP TABLE task_output_totals;
ALTER TABLE task_output_batches RENAME TO task_output;

-- migration 20
-- The triggers every drain runs are small and call no function (issues 48, 49;
-- measured in docs/benchmarks/flow.md). SQLite runs a trigger's program for every row
-- its event matches, allocating and clearing all of its registers before its WHEN is
-- read; and a function call such as max() or randomblob() anywhere in the triggers a
-- statement may reach makes that statement keep a statement journal (a copy of every
-- page it writes), whether or not the trigger fires. The gate triggers of migration 15
-- and the webhook triggers of migration 16 did both on every lease, task end and job
-- delete, keyed or not, webhook or none: the drain of a plain backlog ran at 0.82x of
-- the build before them. Now a gate trigger on `jobs` only notes its event in
-- gate_events, whose own trigger does the work and deletes the note in the same
-- statement (the table is empty between statements): a job without a key runs a few
-- registers' worth of trigger. The webhook triggers stay whole (without a route they
-- stop at the EXISTS, and a note would cost a webhook's every event a row written and
-- deleted) but call no function: a webhook-id is made of the task's id and the version
-- its event left it at (`msg_<task id>_<version>`; `_0` for task.created: versions
-- start at 1), not of randomblob(): unique, as task ids are, and the same for one event
-- at every webhook it goes to. max() becomes CASE. The admission of held jobs, written
-- three times in migration 15, is written once (gate_place_given).
DROP TRIGGER jobs_gate_place_freed;
DROP TRIGGER jobs_gate_place_left;
DROP TRIGGER jobs_gate_rejoined;
DROP TRIGGER gate_holds_place_freed;
DROP TRIGGER identity_queue_job_in;
DROP TRIGGER identity_queue_turn;
DROP TRIGGER tasks_webhook_created;
DROP TRIGGER tasks_webhook_status;
CREATE TRIGGER identity_queue_job_in AFTER INSERT ON jobs BEGIN
    INSERT OR FAIL INTO identity_queue (owner, priority, jobs, last_turn)
        VALUES (NEW.owner, NEW.priority, 0, NEW.turn)
        ON CONFLICT (owner, priority) DO NOTHING;
    UPDATE OR FAIL identity_queue SET jobs = jobs + 1,
        last_turn = CASE WHEN last_turn IS NULL OR NEW.turn > last_turn
                         THEN coalesce(NEW.turn, last_turn) ELSE last_turn END
        WHERE owner = NEW.owner AND priority = NEW.priority;
END;
CREATE TRIGGER identity_queue_turn AFTER UPDATE OF turn ON jobs
    WHEN NEW.turn IS NOT NULL BEGIN
    UPDATE OR FAIL identity_queue
        SET last_turn = CASE WHEN last_turn > NEW.turn THEN last_turn ELSE NEW.turn END
        WHERE owner = NEW.owner AND priority = NEW.priority;
END;
-- A gate's event: a place given back (rejoined NULL: admit the oldest held jobs, as far
-- as the limit allows), or a job back from waiting for input (rejoined: its task id;
-- held again when its gate is full or an older job of it is held).
CREATE TABLE gate_events (
    gate       TEXT NOT NULL,
    rejoined   TEXT,
    gate_limit INTEGER
);
CREATE TRIGGER gate_place_given AFTER INSERT ON gate_events WHEN NEW.rejoined IS NULL BEGIN
    UPDATE OR FAIL jobs SET held = 0 WHERE task_id IN (
        SELECT task_id FROM jobs WHERE gate = NEW.gate AND held = 1 ORDER BY task_id
        LIMIT (SELECT CASE WHEN free > 0 THEN free ELSE 0 END FROM (SELECT
            coalesce((SELECT gate_limit FROM jobs WHERE gate = NEW.gate AND held = 1
                      ORDER BY task_id DESC LIMIT 1), 0)
            - (SELECT count(*) FROM jobs WHERE gate = NEW.gate AND held = 0
               AND state <> 'waiting')
            - (SELECT count(*) FROM gate_holds WHERE gate = NEW.gate) AS free)));
    DELETE FROM gate_events WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER gate_rejoined AFTER INSERT ON gate_events WHEN NEW.rejoined IS NOT NULL BEGIN
    UPDATE OR FAIL jobs SET held = 1, turn = NULL WHERE task_id = NEW.rejoined
        AND ((SELECT count(*) FROM jobs WHERE gate = NEW.gate AND held = 0
              AND state <> 'waiting' AND task_id <> NEW.rejoined)
             + (SELECT count(*) FROM gate_holds WHERE gate = NEW.gate) >= NEW.gate_limit
            OR EXISTS (SELECT 1 FROM jobs WHERE gate = NEW.gate AND held = 1
                       AND task_id < NEW.rejoined));
    DELETE FROM gate_events WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER jobs_gate_place_freed AFTER DELETE ON jobs
    WHEN OLD.gate IS NOT NULL AND OLD.held = 0 AND OLD.state <> 'waiting' BEGIN
    INSERT OR FAIL INTO gate_events (gate) VALUES (OLD.gate);
END;
CREATE TRIGGER jobs_gate_waiting AFTER UPDATE OF state ON jobs
    WHEN NEW.gate IS NOT NULL AND NEW.held = 0
        AND (OLD.state = 'waiting') <> (NEW.state = 'waiting') BEGIN
    INSERT OR FAIL INTO gate_events (gate, rejoined, gate_limit)
        SELECT NEW.gate, CASE WHEN NEW.state = 'queued' THEN NEW.task_id END, NEW.gate_limit
        WHERE NEW.state IN ('waiting', 'queued');
END;
CREATE TRIGGER gate_holds_place_freed AFTER DELETE ON gate_holds BEGIN
    INSERT OR FAIL INTO gate_events (gate) VALUES (OLD.gate);
END;
CREATE TRIGGER tasks_webhook_created AFTER INSERT ON tasks
    WHEN EXISTS (SELECT 1 FROM webhook_routes) BEGIN
    INSERT OR FAIL INTO webhook_deliveries (webhook, id, task_id, event, tool, status, at_ms, since)
        SELECT webhook, 'msg_' || NEW.id || '_0', NEW.id, event, NEW.tool,
               NEW.status, NEW.updated_at, NEW.updated_at
        FROM webhook_routes WHERE event = 'task.created' AND tool IN ('*', NEW.tool)
            AND tenant IN ('*', NEW.tenant) AND principal IN ('*', NEW.principal)
        GROUP BY webhook;
    INSERT OR FAIL INTO webhook_deliveries (webhook, id, task_id, event, tool, status, at_ms, since)
        SELECT webhook, 'msg_' || NEW.id || '_' || NEW.version, NEW.id, event, NEW.tool,
               NEW.status, NEW.updated_at, NEW.updated_at
        FROM webhook_routes WHERE NEW.status <> 'working' AND event = 'task.' || NEW.status
            AND tool IN ('*', NEW.tool) AND tenant IN ('*', NEW.tenant)
            AND principal IN ('*', NEW.principal)
        GROUP BY webhook;
END;
CREATE TRIGGER tasks_webhook_status AFTER UPDATE OF status ON tasks
    WHEN OLD.status IS NOT NEW.status AND NEW.status <> 'working'
        AND EXISTS (SELECT 1 FROM webhook_routes) BEGIN
    INSERT OR FAIL INTO webhook_deliveries (webhook, id, task_id, event, tool, status, at_ms, since)
        SELECT webhook, 'msg_' || NEW.id || '_' || NEW.version, NEW.id, event, NEW.tool,
               NEW.status, NEW.updated_at, NEW.updated_at
        FROM webhook_routes WHERE event = 'task.' || NEW.status AND tool IN ('*', NEW.tool)
            AND tenant IN ('*', NEW.tenant) AND principal IN ('*', NEW.principal)
        GROUP BY webhook;
END;

-- migration 21
-- A delivery made no longer goes into an index of its own (issue 49; measured in
-- docs/benchmarks/webhooks.md). Every index a write reaches is at least one more page
-- in the commit's WAL frames: on a copied backlog, marking deliveries done moved
-- webhook_deliveries_done's last page in nearly every commit, 2.2 KB of WAL a task.
-- The janitor finds old delivered and dead rows by walking the table in seq order
-- instead (rows are inserted oldest first), a bounded window at a time
-- (crates/sqlite/src/webhooks.rs, prune).
DROP INDEX webhook_deliveries_done;
