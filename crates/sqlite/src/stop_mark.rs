//! The open mark (issue 50): `tasks.db.open` beside the store, written once the store is
//! open and removed when it closes cleanly. Found at the next open, it says the last
//! process stopped without closing the store (a `kill -9`, a crash, a power cut).
//!
//! **Why.** After an unclean stop, transactions that were acknowledged may live only in
//! the write-ahead log (`tasks.db-wal`) until the next open replays them. SQLite cannot
//! tell a database whose log was deleted (an operator tidying up, a copy of `tasks.db`
//! without its `-wal`) from one that never had a log: it opens it, and those tasks are
//! gone without a word. The mark records which files the last process used (device and
//! inode of the database and of its log), so an open after an unclean stop refuses:
//!
//! - a log that has gone (its transactions would be lost);
//! - a database or log that is not the file the last process used (a copy, a restored
//!   database beside an old log: a log is only ever valid for its own database).
//!
//! The refusal names the cause and the remedies: put the log back, restore from a
//! backup (`mcp-taskd restore` removes the mark: a restored database is whole) or a
//! Litestream replica, or start with `--accept-data-loss`. After a clean stop there is
//! no mark and nothing to check: the close checkpointed the log into the database.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The mark's file name in the data dir.
pub const MARK: &str = "tasks.db.open";

/// A file's identity: which file it is, not what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(path: &Path) -> Option<FileId> {
        std::fs::metadata(path).ok().map(|meta| FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    fn write(self, name: &str) -> String {
        format!("{name} {} {}\n", self.dev, self.ino)
    }
}

/// What the mark says about the last process's files.
#[derive(Debug, PartialEq)]
struct Mark {
    database: Option<FileId>,
    log: Option<FileId>,
}

impl Mark {
    fn parse(text: &str) -> Mark {
        let mut mark = Mark {
            database: None,
            log: None,
        };
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some(name), Some(dev), Some(ino)) = (words.next(), words.next(), words.next())
            else {
                continue;
            };
            let (Ok(dev), Ok(ino)) = (dev.parse(), ino.parse()) else {
                continue;
            };
            let id = Some(FileId { dev, ino });
            match name {
                "database" => mark.database = id,
                "log" => mark.log = id,
                _ => {}
            }
        }
        mark
    }
}

fn log_path(database: &Path) -> PathBuf {
    let mut log = database.as_os_str().to_owned();
    log.push("-wal");
    PathBuf::from(log)
}

/// Why an open after an unclean stop is refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "{} was not closed cleanly (the last mcp-taskd using it stopped without closing it: \
     kill -9, a crash or a power cut), and {why}: starting would lose the tasks only the \
     write-ahead log held. Put the original {} back if you have it; or restore the store \
     from a backup or its Litestream replica with mcp-taskd restore FILE; or start once \
     with --accept-data-loss to go on with what the database holds",
    .database.display(),
    .log.display()
)]
pub struct HalfRestored {
    pub database: PathBuf,
    pub log: PathBuf,
    pub why: &'static str,
}

/// Checks the data dir before the store is opened: `Err` when the last process
/// stopped uncleanly and the files are not the ones it used. `accept_data_loss`: log
/// what would be refused, and go on.
pub fn check(data_dir: &Path, database: &Path, accept_data_loss: bool) -> Result<(), HalfRestored> {
    let Ok(text) = std::fs::read_to_string(data_dir.join(MARK)) else {
        return Ok(());
    };
    let mark = Mark::parse(&text);
    let log = log_path(database);
    let (now_database, now_log) = (FileId::of(database), FileId::of(&log));
    let why = if now_database.is_none() && mark.database.is_some() {
        Some("the database file has gone")
    } else if now_database != mark.database {
        Some("the database is not the file it used (a copy or a restored file?)")
    } else if mark.log.is_some() && now_log.is_none() {
        Some("its write-ahead log has gone")
    } else if mark.log.is_some() && now_log.is_some() && now_log != mark.log {
        Some("the write-ahead log beside it is not the one it used (an older log?)")
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(why) => {
            let refused = HalfRestored {
                database: database.to_owned(),
                log,
                why,
            };
            if accept_data_loss {
                log::warn!("starting with --accept-data-loss although: {refused}");
                Ok(())
            } else {
                Err(refused)
            }
        }
    }
}

/// Marks the store open (durably: the mark must be there if the process dies now).
pub fn set(data_dir: &Path, database: &Path) -> std::io::Result<()> {
    let mut text = String::new();
    if let Some(id) = FileId::of(database) {
        text.push_str(&id.write("database"));
    }
    if let Some(id) = FileId::of(&log_path(database)) {
        text.push_str(&id.write("log"));
    }
    let path = data_dir.join(MARK);
    let mut file = std::fs::File::create(&path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::File::open(data_dir)?.sync_all()
}

/// Removes the mark: the store closed cleanly, or was replaced by a whole database
/// (`mcp-taskd restore`).
pub fn clear(data_dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(data_dir.join(MARK)) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
        _ => std::fs::File::open(data_dir)?.sync_all(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unclean_stop_with_its_log_gone_or_replaced_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let database = dir.path().join("tasks.db");
        let log = log_path(&database);
        std::fs::write(&database, b"db").expect("db");
        std::fs::write(&log, b"log").expect("log");
        // No mark: nothing to check.
        assert!(check(dir.path(), &database, false).is_ok());

        set(dir.path(), &database).expect("mark");
        assert!(check(dir.path(), &database, false).is_ok(), "same files");

        std::fs::remove_file(&log).expect("rm log");
        let refused = check(dir.path(), &database, false).expect_err("log gone");
        assert_eq!(refused.why, "its write-ahead log has gone");
        assert!(
            refused.to_string().contains("--accept-data-loss"),
            "{refused}"
        );
        assert!(check(dir.path(), &database, true).is_ok(), "accepted");

        // A log put back from elsewhere is not the one the last process used (written
        // beside the one it replaces, so that it cannot get its freed inode).
        std::fs::write(&log, b"log").expect("log");
        set(dir.path(), &database).expect("mark");
        std::fs::write(dir.path().join("older"), b"an older log").expect("older");
        std::fs::rename(dir.path().join("older"), &log).expect("mv");
        let refused = check(dir.path(), &database, false).expect_err("another log");
        assert!(refused.why.contains("not the one it used"), "{refused}");

        clear(dir.path()).expect("clear");
        assert!(check(dir.path(), &database, false).is_ok(), "a clean stop");
        clear(dir.path()).expect("clearing twice is fine");
    }

    #[test]
    fn a_mark_reads_back_and_ignores_what_it_does_not_know() {
        let mark = Mark::parse("database 1 2\nlog 1 3\nfuture 9 9\nbroken line\n");
        assert_eq!(
            mark,
            Mark {
                database: Some(FileId { dev: 1, ino: 2 }),
                log: Some(FileId { dev: 1, ino: 3 }),
            }
        );
    }
}
