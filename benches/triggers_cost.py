# Per-task cost of the counting triggers in SQLite itself: a task's life (insert task +
# job + outbox, claim, complete + delete job) in batches of 64 per transaction, with and
# without migration 4's triggers, synchronous=OFF so that only CPU is measured.
import os, random, sqlite3, tempfile, time
schema = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'schema.sql')).read()
N = 50000  # tasks per run
#   python3 benches/triggers_cost.py
def run(triggers):
    path = os.path.join(tempfile.gettempdir(), f'trig-{triggers}.db')
    for ext in ('', '-wal', '-shm'):
        if os.path.exists(path + ext): os.remove(path + ext)
    c = sqlite3.connect(path); c.isolation_level = None
    c.execute('PRAGMA journal_mode=WAL'); c.execute('PRAGMA synchronous=OFF')
    c.executescript(schema)
    if not triggers:
        for (name,) in c.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall():
            c.execute(f'DROP TRIGGER {name}')
    ids = [f'{i:012x}{random.getrandbits(64):016x}' for i in range(N)]
    start = time.process_time()
    for b in range(0, N, 64):
        c.execute('BEGIN')
        for i in ids[b:b+64]:
            c.execute("INSERT INTO tasks (id,endpoint,tenant,principal,tool,origin,status,created_at,updated_at,poll_interval_ms) VALUES (?,'/mcp','t','p','noop_task',x'7b7d','working',1,1,500)", (i,))
            c.execute("INSERT INTO jobs (task_id,state,max_attempts,backoff_ms,timeout_ms,run_after,tool) VALUES (?,'queued',3,100,1000,1,'noop_task')", (i,))
            c.execute("INSERT INTO outbox (seq,task_id,created_at) VALUES (NULL,?,1)", (i,))
        c.execute('COMMIT')
    create = time.process_time() - start
    start = time.process_time()
    for b in range(0, N, 64):
        c.execute('BEGIN')
        for i in ids[b:b+64]:
            c.execute("UPDATE jobs SET state='running', attempt=attempt+1, lease_token='x' WHERE task_id=?", (i,))
            c.execute("UPDATE tasks SET status='completed', result='{}', version=version+1 WHERE id=?", (i,))
            c.execute("DELETE FROM jobs WHERE task_id=?", (i,))
        c.execute('COMMIT')
    finish = time.process_time() - start
    c.close()
    for ext in ('', '-wal', '-shm'):
        if os.path.exists(path + ext): os.remove(path + ext)
    return create / N * 1e6, finish / N * 1e6
for r in range(3):
    for t in (False, True):
        cr, fi = run(t)
        print(f'triggers={t!s:5}  create {cr:6.1f} us/task   claim+complete {fi:6.1f} us/task')
