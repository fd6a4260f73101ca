-- mcp-taskd PostgreSQL schema (`store.backend = "postgres"`): the single source of truth
-- for the PostgreSQL store, as schema.sql is for SQLite. Same tables and meaning.
--
-- src/tasks/postgres/migrations.rs embeds this file and applies it at start-up. Each
-- block headed `-- migration N` runs once, in order, in its own transaction, while the
-- node holds a session advisory lock (so two nodes starting together migrate once);
-- `taskd_migrations` records the blocks applied. Never change the SQL of a block that
-- has shipped: add a new one.
--
-- Times are Unix milliseconds. Every time a node compares (leases, run_after, expiry)
-- comes from the DATABASE clock (`taskd_now_ms()`), never from a node's own clock, so
-- nodes with skewed clocks cannot steal each other's live leases. `created_at` and
-- `updated_at` are what the creating node told its client. Task contents (origin,
-- arguments, results, input) are sensitive: stored here, returned to their owner,
-- never logged.
--
-- Advisory locks: class 1952542059 ('task'), object 2 = migrations,
-- 3 = upkeep leader; class 1801812339 ('keys') = idempotency keys, by hash.

-- migration 1
CREATE FUNCTION taskd_now_ms() RETURNS bigint LANGUAGE sql STABLE AS
    $$ SELECT (extract(epoch FROM now()) * 1000)::bigint $$;
-- `ms` after the database's now, saturating (a TTL may be as long as bigint allows).
CREATE FUNCTION taskd_after_ms(ms bigint) RETURNS bigint LANGUAGE sql STABLE AS
    $$ SELECT LEAST(taskd_now_ms()::numeric + ms, 9223372036854775807)::bigint $$;

CREATE TABLE tasks (
    id               text PRIMARY KEY,            -- ms time prefix + 128 CSPRNG bits (src/tasks/ids.rs)
    -- Authorization binding: every lookup and mutation matches all three.
    endpoint         text NOT NULL,
    tenant           text NOT NULL,
    principal        text NOT NULL,
    tool             text NOT NULL,
    -- Opaque origin, written once at creation, read back byte for byte by workers.
    origin           bytea NOT NULL,
    status           text NOT NULL
                     CHECK (status IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
    status_message   text,
    created_at       bigint NOT NULL,
    updated_at       bigint NOT NULL,
    ttl_ms           bigint,                      -- NULL: unlimited
    expires_at       bigint,                      -- database clock at creation + ttl_ms
    poll_interval_ms bigint NOT NULL,
    result           text,
    error            text,
    input_requests   text,
    input_responses  text NOT NULL DEFAULT '{}',
    tool_state       text,
    cancel_requested boolean NOT NULL DEFAULT false,
    idempotency_key  text,
    arguments_digest bytea,
    version          bigint NOT NULL DEFAULT 1
);
-- Not UNIQUE, as in SQLite: creations with a key serialize on an advisory lock of the
-- key (src/tasks/postgres/sql/create.rs), which keeps keys unique among live tasks.
CREATE INDEX tasks_by_idempotency_key
    ON tasks (endpoint, tenant, principal, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_by_expiry ON tasks (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE input_keys (
    task_id text NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    key     text NOT NULL,
    PRIMARY KEY (task_id, key)
);

-- The dispatch record of a non-terminal task. Deleted when the task ends.
CREATE TABLE jobs (
    task_id       text PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    tool          text NOT NULL,
    state         text NOT NULL CHECK (state IN ('queued', 'running', 'waiting')),
    attempt       bigint NOT NULL DEFAULT 0,
    max_attempts  bigint NOT NULL,
    backoff_ms    bigint NOT NULL,
    timeout_ms    bigint NOT NULL,
    run_after     bigint NOT NULL,               -- database clock
    lease_token   text,                          -- fencing token of the current claim
    lease_node    text,                          -- the node that claimed it (its data dir's id)
    lease_expires bigint,                        -- database clock
    deadline      bigint,                        -- database clock
    last_error    text
);
CREATE INDEX jobs_ready ON jobs (run_after) WHERE state = 'queued';
CREATE INDEX jobs_queued_by_tool ON jobs (tool, run_after) WHERE state = 'queued';
CREATE INDEX jobs_leased ON jobs (lease_expires) WHERE state = 'running';

CREATE TABLE attempts (
    task_id    text NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt    bigint NOT NULL,
    started_at bigint NOT NULL,
    ended_at   bigint,
    outcome    text,
    PRIMARY KEY (task_id, attempt)
);

-- Task changes, written in the same transaction as the change. A row's position in
-- the outbox is the id of the transaction that wrote it (`xid`), not `seq`: sequence
-- values commit out of order, and a relay reading `seq > last` could skip a row whose
-- transaction commits late. Instead a relay reads the rows of transactions older than
-- the oldest one still running (`pg_snapshot_xmin`): every such transaction has ended,
-- so its rows are all visible, and a transaction that commits later has a larger id
-- than that horizon. Nothing is skipped, and no lock orders the commits (holding one
-- through every commit would serialize them and give up PostgreSQL's group commit).
-- `seq` orders the rows of one transaction.
CREATE TABLE outbox (
    seq        bigserial PRIMARY KEY,
    xid        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    task_id    text NOT NULL,
    created_at bigint NOT NULL                   -- database clock
);
CREATE INDEX outbox_by_xid ON outbox (xid);

-- How far each node's relay has delivered the outbox, as its janitor last said
-- (every tick): rows are pruned up to the slowest node seen in the last 30 s, so no
-- live node's relay loses a row it has not read. A node gone for longer is left out.
CREATE TABLE relay_cursors (
    node      text PRIMARY KEY,
    delivered bigint NOT NULL,
    seen_at   bigint NOT NULL                    -- database clock
);

-- Appends the outbox row of a task change. The node that committed it then sends
-- `NOTIFY mcp_taskd_outbox` (after its commit, in a transaction of its own: a NOTIFY
-- inside the change's transaction would take PostgreSQL's notification-queue lock
-- through the commit's WAL flush, and serialize every change of every node).
CREATE FUNCTION taskd_append_outbox(changed text) RETURNS void LANGUAGE sql AS $$
    INSERT INTO outbox (task_id, created_at) VALUES (changed, taskd_now_ms());
$$;

-- Counts for /metrics without scanning. A trigger-kept counter row would be updated by
-- every transaction and serialize them all on its row lock; instead triggers append
-- +1/-1 rows to *_deltas (inserts never contend), the upkeep leader folds them into
-- the totals every janitor tick, and a read adds the few unfolded deltas. The deltas
-- are written in the transaction that changes the row: as durable as the rows.
CREATE TABLE task_counts (
    tool   text NOT NULL,
    status text NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (tool, status)
);
CREATE TABLE task_count_deltas (tool text NOT NULL, status text NOT NULL, n bigint NOT NULL);
-- Tasks created, and tasks that reached each terminal status, by tool (counters).
CREATE TABLE task_totals (
    tool      text PRIMARY KEY,
    created   bigint NOT NULL DEFAULT 0,
    completed bigint NOT NULL DEFAULT 0,
    failed    bigint NOT NULL DEFAULT 0,
    cancelled bigint NOT NULL DEFAULT 0
);
CREATE TABLE task_total_deltas (
    tool      text NOT NULL,
    created   bigint NOT NULL,
    completed bigint NOT NULL,
    failed    bigint NOT NULL,
    cancelled bigint NOT NULL
);
CREATE TABLE job_counts (state text PRIMARY KEY, n bigint NOT NULL);
CREATE TABLE job_count_deltas (state text NOT NULL, n bigint NOT NULL);

CREATE FUNCTION taskd_count_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO task_count_deltas VALUES (NEW.tool, NEW.status, 1);
        INSERT INTO task_total_deltas VALUES (NEW.tool, 1,
            (NEW.status = 'completed')::int, (NEW.status = 'failed')::int,
            (NEW.status = 'cancelled')::int);
    ELSIF TG_OP = 'UPDATE' THEN
        IF OLD.status IS DISTINCT FROM NEW.status THEN
            INSERT INTO task_count_deltas VALUES (OLD.tool, OLD.status, -1), (NEW.tool, NEW.status, 1);
            IF NEW.status IN ('completed', 'failed', 'cancelled') THEN
                INSERT INTO task_total_deltas VALUES (NEW.tool, 0,
                    (NEW.status = 'completed')::int, (NEW.status = 'failed')::int,
                    (NEW.status = 'cancelled')::int);
            END IF;
        END IF;
    ELSE
        INSERT INTO task_count_deltas VALUES (OLD.tool, OLD.status, -1);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER tasks_counted AFTER INSERT OR UPDATE OF status OR DELETE ON tasks
    FOR EACH ROW EXECUTE FUNCTION taskd_count_tasks();

CREATE FUNCTION taskd_count_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_count_deltas VALUES (NEW.state, 1);
    ELSIF TG_OP = 'UPDATE' THEN
        IF OLD.state IS DISTINCT FROM NEW.state THEN
            INSERT INTO job_count_deltas VALUES (OLD.state, -1), (NEW.state, 1);
        END IF;
    ELSE
        INSERT INTO job_count_deltas VALUES (OLD.state, -1);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_counted AFTER INSERT OR UPDATE OF state OR DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION taskd_count_jobs();

-- Folds the deltas into the counts (the upkeep leader, every janitor tick). Each delta
-- row is deleted and added in the same transaction: counted exactly once.
CREATE FUNCTION taskd_fold_counts() RETURNS void LANGUAGE sql AS $$
    WITH d AS (DELETE FROM task_count_deltas RETURNING tool, status, n)
    INSERT INTO task_counts (tool, status, n)
        SELECT tool, status, SUM(n) FROM d GROUP BY tool, status
        ON CONFLICT (tool, status) DO UPDATE SET n = task_counts.n + excluded.n;
    WITH d AS (DELETE FROM task_total_deltas RETURNING *)
    INSERT INTO task_totals (tool, created, completed, failed, cancelled)
        SELECT tool, SUM(created), SUM(completed), SUM(failed), SUM(cancelled)
        FROM d GROUP BY tool
        ON CONFLICT (tool) DO UPDATE SET created = task_totals.created + excluded.created,
            completed = task_totals.completed + excluded.completed,
            failed = task_totals.failed + excluded.failed,
            cancelled = task_totals.cancelled + excluded.cancelled;
    WITH d AS (DELETE FROM job_count_deltas RETURNING state, n)
    INSERT INTO job_counts (state, n)
        SELECT state, SUM(n) FROM d GROUP BY state
        ON CONFLICT (state) DO UPDATE SET n = job_counts.n + excluded.n;
$$;

-- Node-independent secrets (the key that seals MRTR requestState), so that a state
-- sealed by one node opens on every other.
CREATE TABLE secrets (
    name  text PRIMARY KEY,
    value bytea NOT NULL
);

-- migration 2
-- OAuth identities: the issuer that vouched for a task's principal is part of its
-- authorization binding (src/auth.rs, Identity); empty for static tokens and anonymous
-- callers, which is what every task stored before was. A constant default: no rewrite.
ALTER TABLE tasks ADD COLUMN issuer text NOT NULL DEFAULT '';

-- migration 3
-- The W3C trace context a task was created in (issue 33), as in schema.sql (migration
-- 7): its `traceparent`, then a space and its `tracestate` when there is one.
ALTER TABLE tasks ADD COLUMN trace_context text;

-- migration 4
-- Fair claiming (issue 29): the same columns and meaning as schema.sql's migration 8
-- (src/tasks/model.rs, TURN). A claim takes the job of the highest `priority`, then of
-- the smallest `turn`, then the oldest (jobs_turns), whatever the number of identities.
-- - owner: the job's identity, every field length-prefixed (auth::Identity::key).
-- - stride: TURN divided by the identity's weight when the job was created.
-- - turn NULL: a retry waiting for its backoff (and the jobs queued before this
--   migration); each claim statement gives due jobs their turns first (jobs_due).
-- Two nodes (or the two creation transactions of one node) queueing jobs of one
-- identity at the same moment read the same last turn: those jobs share turns, and the
-- identity gets up to two turns for one while they last.
ALTER TABLE jobs ADD COLUMN owner text NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN priority bigint NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN stride bigint NOT NULL DEFAULT 1048576;
ALTER TABLE jobs ADD COLUMN turn bigint;
UPDATE jobs SET owner = length(t.endpoint) || ':' || t.endpoint || length(t.issuer) || ':'
        || t.issuer || length(t.tenant) || ':' || t.tenant || length(t.principal) || ':'
        || t.principal
    FROM tasks t WHERE t.id = jobs.task_id;
DROP INDEX jobs_queued_by_tool;
CREATE INDEX jobs_turns ON jobs (priority DESC, turn, task_id)
    WHERE state = 'queued' AND turn IS NOT NULL;
CREATE INDEX jobs_turns_by_owner ON jobs (owner, priority, turn)
    WHERE state = 'queued' AND turn IS NOT NULL;
CREATE INDEX jobs_due ON jobs (run_after) WHERE state = 'queued' AND turn IS NULL;

-- The next turn of owner $1 at priority $2 for a job of stride $3: a stride after the
-- owner's last queued turn there (jobs_turns_by_owner), never before the first turn
-- queued there (jobs_turns). STABLE: every row of one statement sees the same queue,
-- so a statement that queues several jobs of one owner adds each one's rank times its
-- stride.
CREATE FUNCTION taskd_turn(text, bigint, bigint) RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT GREATEST(
        COALESCE((SELECT turn FROM jobs WHERE state = 'queued' AND turn IS NOT NULL
                  AND priority = $2 ORDER BY turn LIMIT 1), 0),
        COALESCE((SELECT turn FROM jobs WHERE state = 'queued' AND turn IS NOT NULL
                  AND owner = $1 AND priority = $2 ORDER BY turn DESC LIMIT 1) + $3, 0))
$$;

-- migration 5
-- Per-identity quota of tasks not yet terminal, as schema.sql's migration 9.
CREATE INDEX jobs_by_owner ON jobs (owner);

-- migration 6
-- One index by owner instead of two, as schema.sql's migration 10: jobs_by_owner
-- (owner, priority, turn) holds every job, is not rewritten by a claim, and serves the
-- quota's count and an identity's last turn, queued or in service.
DROP INDEX jobs_turns_by_owner;
DROP INDEX jobs_by_owner;
CREATE INDEX jobs_by_owner ON jobs (owner, priority, turn);
CREATE OR REPLACE FUNCTION taskd_turn(text, bigint, bigint) RETURNS bigint
    LANGUAGE sql STABLE AS $$
    SELECT GREATEST(
        COALESCE((SELECT turn FROM jobs WHERE state = 'queued' AND turn IS NOT NULL
                  AND priority = $2 ORDER BY turn LIMIT 1), 0),
        COALESCE((SELECT turn FROM jobs WHERE owner = $1 AND priority = $2
                  AND turn IS NOT NULL ORDER BY turn DESC LIMIT 1) + $3, 0))
$$;

-- migration 7
-- Legacy sessions, as schema.sql's migration 11: any node serves a session another
-- opened, and a restart ends none.
CREATE TABLE sessions (
    id            text PRIMARY KEY,
    owner         text NOT NULL,
    version       text NOT NULL,
    capabilities  text NOT NULL,
    client_info   text NOT NULL,
    log_level     text,
    subscriptions text NOT NULL,
    followed      text NOT NULL,
    last_used     bigint NOT NULL
);
CREATE INDEX sessions_last_used ON sessions (last_used);

-- migration 8
-- The counting triggers once a statement instead of once a row (issue 35): a group of
-- finishes or creations changes many rows in one statement, and each row's trigger
-- call and its own delta inserts cost PostgreSQL more than the rows' change itself.
-- Each statement now appends its deltas already summed, from its transition tables
-- (which hold every row of one kind of change of the statement, its data-modifying
-- CTEs' and its cascades' included). Same deltas, same folding (taskd_fold_counts).
-- Transition tables take no column list: the UPDATE triggers run for every UPDATE
-- statement, and count the rows whose status (state) changed.
DROP TRIGGER tasks_counted ON tasks;
DROP TRIGGER jobs_counted ON jobs;
DROP FUNCTION taskd_count_tasks();
DROP FUNCTION taskd_count_jobs();

CREATE FUNCTION taskd_count_inserted_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO task_count_deltas
        SELECT tool, status, COUNT(*) FROM inserted GROUP BY tool, status;
    INSERT INTO task_total_deltas
        SELECT tool, COUNT(*), COUNT(*) FILTER (WHERE status = 'completed'),
            COUNT(*) FILTER (WHERE status = 'failed'),
            COUNT(*) FILTER (WHERE status = 'cancelled')
        FROM inserted GROUP BY tool;
    RETURN NULL;
END $$;
CREATE TRIGGER tasks_counted_inserts AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION taskd_count_inserted_tasks();

CREATE FUNCTION taskd_count_updated_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH moved AS (
        SELECT new_rows.tool, old_rows.status AS old_status, new_rows.status AS new_status
        FROM old_rows JOIN new_rows ON new_rows.id = old_rows.id
        WHERE new_rows.status <> old_rows.status),
    counted AS (
        INSERT INTO task_count_deltas
            SELECT tool, status, SUM(n) FROM (
                SELECT tool, old_status AS status, -1 AS n FROM moved
                UNION ALL SELECT tool, new_status, 1 FROM moved) AS d
            GROUP BY tool, status)
    INSERT INTO task_total_deltas
        SELECT tool, 0, COUNT(*) FILTER (WHERE new_status = 'completed'),
            COUNT(*) FILTER (WHERE new_status = 'failed'),
            COUNT(*) FILTER (WHERE new_status = 'cancelled')
        FROM moved WHERE new_status IN ('completed', 'failed', 'cancelled')
        GROUP BY tool;
    RETURN NULL;
END $$;
CREATE TRIGGER tasks_counted_updates AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskd_count_updated_tasks();

CREATE FUNCTION taskd_count_deleted_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO task_count_deltas
        SELECT tool, status, -COUNT(*) FROM deleted GROUP BY tool, status;
    RETURN NULL;
END $$;
CREATE TRIGGER tasks_counted_deletes AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION taskd_count_deleted_tasks();

CREATE FUNCTION taskd_count_inserted_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_count_deltas SELECT state, COUNT(*) FROM inserted GROUP BY state;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_counted_inserts AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION taskd_count_inserted_jobs();

CREATE FUNCTION taskd_count_updated_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_count_deltas
        SELECT state, SUM(n) FROM (
            SELECT old_rows.state, -1 AS n FROM old_rows JOIN new_rows USING (task_id)
            WHERE new_rows.state <> old_rows.state
            UNION ALL
            SELECT new_rows.state, 1 FROM old_rows JOIN new_rows USING (task_id)
            WHERE new_rows.state <> old_rows.state) AS d
        GROUP BY state;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_counted_updates AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskd_count_updated_jobs();

CREATE FUNCTION taskd_count_deleted_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_count_deltas SELECT state, -COUNT(*) FROM deleted GROUP BY state;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_counted_deletes AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION taskd_count_deleted_jobs();

-- migration 9
-- A task's output (issue 47), as schema.sql's migration 14: the lines its attempts
-- wrote, in order, at most a cap of bytes per task (the newest); the totals row counts
-- what was kept and dropped and where the next line goes. Both go with their task.
CREATE TABLE task_output (
    task_id text NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq     bigint NOT NULL,
    attempt bigint NOT NULL,
    at_ms   bigint NOT NULL,
    stream  text NOT NULL,
    line    text NOT NULL,
    PRIMARY KEY (task_id, seq)
);
CREATE TABLE task_output_totals (
    task_id    text PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    next_seq   bigint NOT NULL,
    kept_bytes bigint NOT NULL,
    dropped    bigint NOT NULL
);

-- migration 10
-- Flow control (issue 48), as schema.sql's migration 15: a keyed job's gate, its
-- places (admitted jobs and inline holds), held jobs admitted in creation order when a
-- place is given back, rate buckets, paused tools. Nodes take turns on a gate with a
-- transaction advisory lock of its id (taskd_gate_lock): creation, every admission and
-- every hold count the gate's places under it, so two nodes never both fill its last
-- place. Each statement of a VOLATILE function reads what committed before it (READ
-- COMMITTED), so a count taken under the lock sees the previous holder's commit.
-- The database's clock as it reads now (now() is the transaction's start: a
-- transaction that waited for a gate's lock, or a bucket's row, would record the time
-- before it waited). Attempts' starts and ends, and rate buckets, use it, so that what
-- the attempts table records of one key never shows two runs overlapping that did not.
CREATE FUNCTION taskd_clock_ms() RETURNS bigint LANGUAGE sql VOLATILE AS
    $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;
ALTER TABLE jobs ADD COLUMN gate text;
ALTER TABLE jobs ADD COLUMN gate_label text;
ALTER TABLE jobs ADD COLUMN gate_limit bigint;
ALTER TABLE jobs ADD COLUMN held boolean NOT NULL DEFAULT false;
CREATE INDEX jobs_gates ON jobs (gate, held, task_id) WHERE gate IS NOT NULL;
DROP INDEX jobs_due;
CREATE INDEX jobs_due ON jobs (run_after) WHERE state = 'queued' AND turn IS NULL AND NOT held;
CREATE TABLE gate_holds (
    gate       text NOT NULL,
    holder     text NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (gate, holder)
);
CREATE INDEX gate_holds_expiry ON gate_holds (expires_at);

CREATE FUNCTION taskd_gate_lock(g text) RETURNS void LANGUAGE sql VOLATILE AS
    $$ SELECT pg_advisory_xact_lock(1734439525, hashtext(g)) $$;

-- The places gate g has taken, but that of job `but`.
CREATE FUNCTION taskd_gate_places(g text, but text) RETURNS bigint
    LANGUAGE sql VOLATILE AS $$
    SELECT (SELECT count(*) FROM jobs WHERE gate = g AND NOT held AND state <> 'waiting'
            AND task_id IS DISTINCT FROM but)
         + (SELECT count(*) FROM gate_holds WHERE gate = g) $$;

-- Admits the oldest held jobs of gate g as far as its limit (the newest held job's)
-- allows.
CREATE FUNCTION taskd_gate_admit(g text) RETURNS void LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    free bigint;
BEGIN
    PERFORM taskd_gate_lock(g);
    SELECT (SELECT gate_limit FROM jobs WHERE gate = g AND held ORDER BY task_id DESC LIMIT 1)
         - taskd_gate_places(g, NULL) INTO free;
    IF free > 0 THEN
        UPDATE jobs SET held = false WHERE task_id IN (
            SELECT task_id FROM jobs WHERE gate = g AND held ORDER BY task_id LIMIT free);
    END IF;
END $$;

CREATE FUNCTION taskd_gate_job_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF NOT OLD.held AND OLD.state <> 'waiting' THEN
            PERFORM taskd_gate_admit(OLD.gate);
        END IF;
    ELSIF NOT NEW.held AND OLD.state <> 'waiting' AND NEW.state = 'waiting' THEN
        PERFORM taskd_gate_admit(NEW.gate);
    ELSIF NOT NEW.held AND OLD.state = 'waiting' AND NEW.state = 'queued' THEN
        PERFORM taskd_gate_lock(NEW.gate);
        IF taskd_gate_places(NEW.gate, NEW.task_id) >= NEW.gate_limit
           OR EXISTS (SELECT 1 FROM jobs WHERE gate = NEW.gate AND held
                      AND task_id < NEW.task_id) THEN
            UPDATE jobs SET held = true, turn = NULL WHERE task_id = NEW.task_id;
        END IF;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_gate_deleted AFTER DELETE ON jobs
    FOR EACH ROW WHEN (OLD.gate IS NOT NULL) EXECUTE FUNCTION taskd_gate_job_changed();
CREATE TRIGGER jobs_gate_state AFTER UPDATE OF state ON jobs
    FOR EACH ROW WHEN (NEW.gate IS NOT NULL) EXECUTE FUNCTION taskd_gate_job_changed();

CREATE FUNCTION taskd_gate_hold_freed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM taskd_gate_admit(OLD.gate);
    RETURN NULL;
END $$;
CREATE TRIGGER gate_holds_deleted AFTER DELETE ON gate_holds
    FOR EACH ROW EXECUTE FUNCTION taskd_gate_hold_freed();

CREATE TABLE rate_buckets (
    bucket     text PRIMARY KEY,
    tokens     double precision NOT NULL,
    updated_at bigint NOT NULL,
    per_ms     double precision NOT NULL,
    burst      double precision NOT NULL
);
CREATE TABLE tool_pauses (
    tool      text PRIMARY KEY,
    reason    text NOT NULL,
    paused_at bigint NOT NULL
);

-- migration 11
-- Webhooks (issue 49), as schema.sql's migration 16: the routes the configured webhooks
-- want, and one pending delivery per matching webhook inserted in the transaction of
-- the task's change, by statement triggers that read the statement's transition tables
-- (as the counting triggers do) and stop at once while there are no routes. Deliveries
-- of one task are ordered by `seq`: two changes of one task lock its row in turn, so
-- the later change's deliveries take later values of the sequence and commit after.
-- A node claims due deliveries with FOR UPDATE SKIP LOCKED and leases them by moving
-- `next_at` past the delivery's time and naming itself in `holder`, so each delivery
-- is made by one node at a time; a lease that lapses (the node died) makes it due
-- again for any node.
CREATE TABLE webhook_routes (
    event     text NOT NULL,
    webhook   text NOT NULL,
    tool      text NOT NULL,
    tenant    text NOT NULL,
    principal text NOT NULL,
    PRIMARY KEY (event, webhook, tool, tenant, principal)
);
CREATE TABLE webhook_deliveries (
    seq         bigserial PRIMARY KEY,
    webhook     text NOT NULL,
    id          text NOT NULL,
    task_id     text NOT NULL,
    event       text NOT NULL,
    tool        text NOT NULL,
    status      text NOT NULL,
    at_ms       bigint NOT NULL,
    since       bigint NOT NULL,
    state       text NOT NULL DEFAULT 'pending',
    attempts    bigint NOT NULL DEFAULT 0,
    next_at     bigint NOT NULL DEFAULT 0,             -- database clock
    holder      text,
    done_at     bigint,                                -- database clock
    last_status integer,
    last_error  text
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (webhook, next_at, seq)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_by_task ON webhook_deliveries (webhook, task_id, seq)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_done ON webhook_deliveries (done_at) WHERE state <> 'pending';

CREATE FUNCTION taskd_webhook_inserted_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_routes) THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_deliveries (webhook, id, task_id, event, tool, status, at_ms, since)
        SELECT m.webhook, 'msg_' || replace(gen_random_uuid()::text, '-', ''), m.id, m.event,
               m.tool, m.status, m.updated_at, m.updated_at
        FROM (SELECT DISTINCT r.webhook, i.id, e.n, e.event, i.tool, i.status, i.updated_at
              FROM inserted i
              CROSS JOIN LATERAL (VALUES (1, 'task.created'), (2, 'task.' || i.status))
                  AS e (n, event)
              JOIN webhook_routes r ON r.event = e.event AND r.tool IN ('*', i.tool)
                  AND r.tenant IN ('*', i.tenant) AND r.principal IN ('*', i.principal)
              WHERE e.n = 1 OR i.status <> 'working') AS m
        ORDER BY m.id, m.n;
    RETURN NULL;
END $$;
CREATE TRIGGER tasks_webhook_inserts AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION taskd_webhook_inserted_tasks();

CREATE FUNCTION taskd_webhook_updated_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_routes) THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_deliveries (webhook, id, task_id, event, tool, status, at_ms, since)
        SELECT m.webhook, 'msg_' || replace(gen_random_uuid()::text, '-', ''), m.id, m.event,
               m.tool, m.status, m.updated_at, m.updated_at
        FROM (SELECT DISTINCT r.webhook, n.id, 'task.' || n.status AS event, n.tool, n.status,
                     n.updated_at
              FROM old_rows o JOIN new_rows n ON n.id = o.id
              JOIN webhook_routes r ON r.event = 'task.' || n.status AND r.tool IN ('*', n.tool)
                  AND r.tenant IN ('*', n.tenant) AND r.principal IN ('*', n.principal)
              WHERE n.status <> o.status AND n.status <> 'working') AS m
        ORDER BY m.id;
    RETURN NULL;
END $$;
CREATE TRIGGER tasks_webhook_updates AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskd_webhook_updated_tasks();

-- migration 12
-- Schedules (issue 49), as schema.sql's migration 17: a scheduled task names its
-- schedule and slot, unique together (two nodes reaching one slot store one task: the
-- second insert finds the first's row, or waits for its commit and then does), and each
-- schedule's mark: the last slot reached, what became of it, its newest task and counts.
ALTER TABLE tasks ADD COLUMN schedule text;
ALTER TABLE tasks ADD COLUMN schedule_slot bigint;
CREATE UNIQUE INDEX tasks_by_schedule_slot ON tasks (schedule, schedule_slot)
    WHERE schedule IS NOT NULL;
CREATE TABLE schedule_marks (
    schedule text PRIMARY KEY,
    slot     bigint NOT NULL,
    outcome  text NOT NULL,
    at       bigint NOT NULL,
    task_id  text,
    created  bigint NOT NULL DEFAULT 0,
    skipped  bigint NOT NULL DEFAULT 0,
    missed   bigint NOT NULL DEFAULT 0,
    refused  bigint NOT NULL DEFAULT 0
);

-- migration 13
-- Retention by outcome (issue 48), as schema.sql's migration 18: `rerun_of`, the task
-- an operator's rerun repeats; `task_history`, the operator's summary of a finished
-- task, written by the janitor in the statement that deletes the task past its TTL
-- (sql::history::expire), kept until keep_until (the task's end plus `[history]`'s
-- duration for its status; removed_at is the database clock), pruned a batch at a
-- time. No result, no output; its origin only with `[history] keep_arguments`.
ALTER TABLE tasks ADD COLUMN rerun_of text;
CREATE TABLE task_history (
    id             text PRIMARY KEY,
    tool           text NOT NULL,
    endpoint       text NOT NULL,
    issuer         text NOT NULL,
    tenant         text NOT NULL,
    principal      text NOT NULL,
    status         text NOT NULL,
    status_message text,
    created_at     bigint NOT NULL,
    updated_at     bigint NOT NULL,
    removed_at     bigint NOT NULL,
    keep_until     bigint NOT NULL,
    error          text,
    attempts       bigint NOT NULL,
    rerun_of       text,
    schedule       text,
    schedule_slot  bigint,
    origin         bytea
);
CREATE INDEX task_history_expiry ON task_history (keep_until);

-- migration 14
-- A task's output one row per batch, as schema.sql's migration 19 (and why): the
-- position of its first line, how many, their bytes, the lines as a JSON array of
-- [at_ms, stream, text]; the newest row holds the task's totals. The lines kept so far
-- become rows of one line each.
CREATE TABLE task_output_batches (
    task_id text NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq     bigint NOT NULL,
    lines   bigint NOT NULL,
    attempt bigint NOT NULL,
    bytes   bigint NOT NULL,
    kept    bigint NOT NULL,
    dropped bigint NOT NULL,
    body    text NOT NULL,
    PRIMARY KEY (task_id, seq)
);
INSERT INTO task_output_batches
    SELECT o.task_id, o.seq, 1, o.attempt, octet_length(o.line), t.kept_bytes, t.dropped,
        json_build_array(json_build_array(o.at_ms, o.stream, o.line))::text
    FROM task_output AS o JOIN task_output_totals AS t ON t.task_id = o.task_id;
DROP TABLE task_output;
DROP TABLE task_output_totals;
ALTER TABLE task_output_batches RENAME TO task_output;
ALTER TABLE task_output RENAME CONSTRAINT task_output_batches_pkey TO task_output_pkey;
ALTER TABLE task_output RENAME CONSTRAINT task_output_batches_task_id_fkey TO task_output_task_id_fkey;
