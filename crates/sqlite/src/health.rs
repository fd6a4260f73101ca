//! Whether the store can write right now, as the writer last found it: the outcome of
//! its last transaction, and whether `tasks.db` is still the file it opened. `/healthz`
//! reads it (no disk I/O per check), and the writer refuses writes at once while a
//! failure stands (see [`super::writer`]).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use rusqlite::ErrorCode;

use taskd_engine::backend::StoreError;

/// What kind of failure stops the store from writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cause {
    /// No space left on the device (`SQLITE_FULL`).
    Full,
    /// The medium or file refuses writes.
    ReadOnly,
    /// An I/O error, a lock not granted, or the database file gone.
    Unavailable,
    Corrupt,
    Other,
}

/// A failed write, as every caller of the failed batch is told (cloneable, unlike the
/// SQLite error it came from).
#[derive(Debug, Clone)]
pub(super) struct Problem {
    pub(super) cause: Cause,
    pub(super) detail: String,
}

impl Problem {
    pub(super) fn new(cause: Cause, detail: impl Into<String>) -> Problem {
        Problem {
            cause,
            detail: detail.into(),
        }
    }

    /// Sorts a SQLite error. SQLite reports a write that met `ENOSPC` as `SQLITE_FULL`;
    /// on a read-only medium, writing to an open file fails with an I/O error (`EROFS`),
    /// which [`Problem::refine`] tells apart.
    pub(super) fn of(error: &rusqlite::Error) -> Problem {
        let cause = match error.sqlite_error_code() {
            Some(ErrorCode::DiskFull) => Cause::Full,
            Some(ErrorCode::ReadOnly) => Cause::ReadOnly,
            Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => Cause::Corrupt,
            Some(
                ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::CannotOpen
                | ErrorCode::SystemIoFailure,
            ) => Cause::Unavailable,
            _ => Cause::Other,
        };
        Problem::new(cause, error.to_string())
    }

    /// An I/O error on a file system that has turned read-only is a read-only store.
    pub(super) fn refine(self, database: &Path) -> Problem {
        if self.cause != Cause::Unavailable {
            return self;
        }
        let opened = std::fs::OpenOptions::new().append(true).open(database);
        match opened {
            Err(error) if error.kind() == std::io::ErrorKind::ReadOnlyFilesystem => {
                Problem::new(Cause::ReadOnly, format!("{}: {error}", self.detail))
            }
            _ => self,
        }
    }

    pub(super) fn to_store_error(&self) -> StoreError {
        let detail = self.detail.clone().into();
        match self.cause {
            Cause::Full => StoreError::Full(detail),
            Cause::ReadOnly => StoreError::ReadOnly(detail),
            Cause::Unavailable => StoreError::Unavailable(detail),
            Cause::Corrupt => StoreError::Corrupt(detail),
            Cause::Other => StoreError::Other(detail),
        }
    }
}

/// How much room the store has left (see [`Health::space`]).
pub(super) enum Space {
    Plenty,
    /// New work is refused.
    Low(Problem),
    /// Every write is refused.
    Exhausted(Problem),
}

/// The store's write health, shared by the writer, the checkpointer and `/healthz`.
pub(super) struct Health {
    database: PathBuf,
    /// Free bytes below which writes are refused (`store.min_free_bytes`).
    min_free: u64,
    /// `(device, inode)` of `tasks.db` when it was opened.
    identity: Option<(u64, u64)>,
    /// Set by [`Health::watch_file`] while `tasks.db` is gone or replaced: writes would
    /// land in a file no later start will see, so they are refused.
    file_gone: AtomicBool,
    /// The last write's failure; `None` once a write commits again.
    last_write: Mutex<Option<Problem>>,
    /// Why the last checkpoint failed, when it failed for lack of space or a medium
    /// that refuses writes: until a checkpoint succeeds again, writes are refused, so
    /// that the WAL does not take the space the checkpoint needs (see [`super::writer`]).
    checkpoint: Mutex<Option<Problem>>,
}

impl Health {
    pub(super) fn new(database: &Path, min_free: u64) -> Health {
        Health {
            database: database.to_owned(),
            min_free,
            identity: file_identity(database),
            file_gone: AtomicBool::new(false),
            last_write: Mutex::new(None),
            checkpoint: Mutex::new(None),
        }
    }

    /// The database file this store writes.
    pub(super) fn database(&self) -> &Path {
        &self.database
    }

    /// Why the store cannot write, if it cannot.
    pub(super) fn problem(&self) -> Option<Problem> {
        self.blocking_problem().or_else(|| {
            self.last_write
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        })
    }

    /// Why writes must be refused before they run: `tasks.db` is not the file the store
    /// opened, or checkpoints fail for lack of space.
    pub(super) fn blocking_problem(&self) -> Option<Problem> {
        self.file_problem().or_else(|| {
            self.checkpoint
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        })
    }

    /// Free space on the data dir's file system against `store.min_free_bytes` (one
    /// `statvfs`, per batch). Below it, writes that admit new work are refused; below
    /// half of it, every write: the store stops before the disk is full, so that the
    /// work already admitted can record its outcome, and the checkpoint that lets the
    /// WAL be reused still finds room to grow `tasks.db`.
    pub(super) fn space(&self) -> Space {
        let Some(free) = self.database.parent().and_then(free_bytes) else {
            return Space::Plenty;
        };
        if free >= self.min_free {
            return Space::Plenty;
        }
        let problem = Problem::new(
            Cause::Full,
            format!(
                "{} KiB left on the data dir's file system, under store.min_free_bytes \
                 ({} KiB)",
                free / 1024,
                self.min_free / 1024
            ),
        );
        if free < self.min_free / 2 {
            Space::Exhausted(problem)
        } else {
            Space::Low(problem)
        }
    }

    /// Records a checkpoint's outcome.
    pub(super) fn record_checkpoint(&self, outcome: Result<(), Problem>) {
        let blocking = outcome
            .err()
            .filter(|problem| matches!(problem.cause, Cause::Full | Cause::ReadOnly));
        *self.checkpoint.lock().unwrap_or_else(|p| p.into_inner()) = blocking;
    }

    /// Set while `tasks.db` is not the file the store opened.
    fn file_problem(&self) -> Option<Problem> {
        self.file_gone.load(Ordering::Acquire).then(|| {
            Problem::new(
                Cause::Unavailable,
                format!(
                    "{} was removed or replaced while the server ran (is the data dir gone?); \
                     restart the server once the data dir is back",
                    self.database.display()
                ),
            )
        })
    }

    /// Records a write's outcome; logs when the store stops and starts writing again.
    pub(super) fn record(&self, outcome: Result<(), &Problem>) {
        let mut last = self.last_write.lock().unwrap_or_else(|p| p.into_inner());
        match (outcome, last.is_some()) {
            (Ok(()), true) => {
                log::warn!("the task store writes again");
                *last = None;
            }
            (Ok(()), false) => {}
            (Err(problem), was_failing) => {
                if !was_failing {
                    log::error!("the task store cannot write: {}", problem.detail);
                }
                *last = Some(problem.clone());
            }
        }
    }

    /// Checks that `tasks.db` is still the file the store opened (a `stat`, run by the
    /// checkpointer thread, not per request).
    pub(super) fn watch_file(&self) {
        let gone = file_identity(&self.database) != self.identity;
        let was_gone = self.file_gone.swap(gone, Ordering::AcqRel);
        if gone && !was_gone {
            log::error!(
                "{} was removed or replaced: refusing writes",
                self.database.display()
            );
        } else if was_gone && !gone {
            log::warn!("{} is back", self.database.display());
        }
    }
}

fn file_identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Bytes an unprivileged process may still write on the file system holding `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `path` is a NUL-terminated string and `stats` a properly sized,
    // writable buffer that statvfs fills in completely when it returns 0.
    let stats = unsafe {
        if libc::statvfs(path.as_ptr(), stats.as_mut_ptr()) != 0 {
            return None;
        }
        stats.assume_init()
    };
    Some((stats.f_bavail as u64).saturating_mul(stats.f_frsize as u64))
}
