# What counting costs: builds a database of N tasks (argv[1]) with the schema up to
# migration 3, applies migration 4 (which seeds the counts), then times the GROUP BY
# count a scrape used to run against reading the trigger-kept rows. Best of 3 (20).
#   python3 benches/count_scan.py 1000000
import os, random, sqlite3, sys, tempfile, time
schema = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'schema.sql')).read()
N = int(sys.argv[1])
path = os.path.join(tempfile.gettempdir(), f'scan-{N}.db')
if os.path.exists(path): os.remove(path)
c = sqlite3.connect(path); c.isolation_level = None
c.execute('PRAGMA journal_mode=WAL')
# the schema up to migration 3 (no triggers) to load fast, then migration 4 (seeds counts)
blocks = schema.split('-- migration 4')
c.executescript(blocks[0])
c.execute('BEGIN')
statuses = ['completed']*90 + ['failed']*5 + ['cancelled']*2 + ['working']*3
tools = ['echo', 'noop_task', 'slow_compute', 'convert']
for i in range(N):
    c.execute("INSERT INTO tasks (id,endpoint,tenant,principal,tool,origin,status,created_at,updated_at,poll_interval_ms,result) VALUES (?,'/mcp','t','p',?,?,?,1,1,500,'{\"content\":[]}')",
              (f'{i:012x}{random.getrandbits(64):016x}', tools[i % 4], b'{"tool":"echo","arguments":{"text":"hello world"}}', statuses[i % 100]))
c.execute('COMMIT')
c.executescript('-- migration 4' + blocks[1])
c.close()
c = sqlite3.connect(path)
def t(sql, reps=3):
    best = 1e9
    for _ in range(reps):
        s = time.perf_counter(); c.execute(sql).fetchall(); best = min(best, time.perf_counter() - s)
    return best
print(f'N={N} db={os.path.getsize(path)>>20} MiB')
print('old: SELECT status, COUNT(*) FROM tasks GROUP BY status            %.1f ms' % (1000*t("SELECT status, COUNT(*) FROM tasks GROUP BY status")))
print('new: SELECT status, SUM(n) FROM task_counts GROUP BY status        %.3f ms' % (1000*t("SELECT status, SUM(n) FROM task_counts GROUP BY status", 20)))
print('new: task_totals                                                   %.3f ms' % (1000*t("SELECT tool, created, completed, failed, cancelled FROM task_totals ORDER BY tool", 20)))
print('old stats: GROUP BY tool, status                                   %.1f ms' % (1000*t("SELECT tool, status, COUNT(*) FROM tasks GROUP BY tool, status")))
os.remove(path)
