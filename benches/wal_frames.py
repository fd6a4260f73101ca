"""Where the WAL bytes of a run go (benches/flash.sh): reads a data dir's tasks.db-wal,
left whole by a run with `store.checkpoints = "external"` (nothing checkpointed) and a
kill -9 (no checkpoint on close), and prints, as one JSON line:

- commits and frames in all, frames a commit (median and mean);
- frames by b-tree (the table or index each page belongs to, read with `dbstat` from a
  copy of the database with the WAL applied), and in how many commits each b-tree
  was written.

Usage: python3 wal_frames.py DATA_DIR TASKS [PAGES_FROM]  (TASKS: tasks in the run, for
the per-task figures). PAGES_FROM: a copy of the data dir taken before the run, whose
b-trees name the pages first (a drain empties `jobs` and its indexes, whose pages then
show as freelist in DATA_DIR); pages it does not know fall back to DATA_DIR's names. The WAL's own format: a 32-byte header, then frames of a 24-byte
header (page number, database size after commit or 0, salts, checksums) and one page;
frames whose salts differ from the header's are left over from before a restart."""

import json
import os
import shutil
import sqlite3
import statistics
import struct
import sys
import tempfile


def frames(wal_path):
    with open(wal_path, "rb") as wal:
        header = wal.read(32)
        magic, _version, page_size, _ckpt, salt1, salt2 = struct.unpack(">IIIIII", header[:24])
        assert magic in (0x377F0682, 0x377F0683), "not a WAL file"
        while True:
            frame = wal.read(24)
            if len(frame) < 24:
                return page_size
            page, commit_size, s1, s2 = struct.unpack(">IIII", frame[:16])
            if (s1, s2) != (salt1, salt2):
                return page_size
            if len(wal.read(page_size)) < page_size:
                return page_size
            yield page, commit_size


def owners(data_dir):
    """Page number -> b-tree name, from a copy with the WAL applied."""
    scratch = tempfile.mkdtemp()
    try:
        for name in ("tasks.db", "tasks.db-wal"):
            if os.path.exists(os.path.join(data_dir, name)):  # a clean stop leaves no WAL
                shutil.copy(os.path.join(data_dir, name), os.path.join(scratch, name))
        db = sqlite3.connect(os.path.join(scratch, "tasks.db"))
        return dict(db.execute("SELECT pageno, name FROM dbstat"))
    finally:
        shutil.rmtree(scratch)


def main():
    data_dir, tasks = sys.argv[1], int(sys.argv[2])
    wal_path = os.path.join(data_dir, "tasks.db-wal")
    pages = owners(data_dir)
    if len(sys.argv) > 3:
        pages.update(owners(sys.argv[3]))
    commits = []
    current = []
    page_size = None
    reader = frames(wal_path)
    try:
        while True:
            page, commit_size = next(reader)
            current.append(page)
            if commit_size:
                commits.append(current)
                current = []
    except StopIteration as end:
        page_size = end.value
    by_tree = {}
    commits_by_tree = {}
    for commit in commits:
        seen = set()
        for page in commit:
            tree = pages.get(page, "page 1 / freelist / new" if page == 1 else "freelist")
            by_tree[tree] = by_tree.get(tree, 0) + 1
            seen.add(tree)
        for tree in seen:
            commits_by_tree[tree] = commits_by_tree.get(tree, 0) + 1
    sizes = [len(c) for c in commits]
    total = sum(sizes)
    print(json.dumps({
        "page_size": page_size,
        "commits": len(commits),
        "frames": total,
        "frames_per_commit_median": statistics.median(sizes) if sizes else 0,
        "frames_per_commit_mean": round(total / len(commits), 2) if commits else 0,
        "tasks_per_commit": round(tasks / len(commits), 2) if commits else 0,
        "frames_per_task": round(total / tasks, 2),
        "wal_bytes_per_task": round(total * (page_size + 24) / tasks),
        "frames_by_btree": dict(sorted(by_tree.items(), key=lambda kv: -kv[1])),
        "commits_by_btree": dict(sorted(commits_by_tree.items(), key=lambda kv: -kv[1])),
    }))


if __name__ == "__main__":
    main()
