//! Files around backup and restore: the staging file a backup is written to, moving it
//! where the operator asked, restoring one into a data dir, and telling from the
//! data-dir lock whether a server runs.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use taskd_sqlite::{verify_database_file, VerifyError};

/// The database's file name in the data dir, and the files SQLite keeps beside it.
const DATABASE: &str = "tasks.db";
const SIDE_FILES: [&str; 2] = ["tasks.db-wal", "tasks.db-shm"];

/// Why moving a backup into place, restoring one, or handing the store's files back
/// failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} already exists", .0.display())]
    Exists(PathBuf),
    #[error("a server is running on {}: stop it before restoring", .0.display())]
    ServerRunning(PathBuf),
    #[error("{} already holds a task store; --force replaces it", .0.display())]
    StoreExists(PathBuf),
    #[error(transparent)]
    NotATaskStore(#[from] VerifyError),
}

/// An I/O failure on `path`.
fn on(path: &Path) -> impl FnOnce(std::io::Error) -> BackupError + '_ {
    move |source| BackupError::File {
        path: path.to_path_buf(),
        source,
    }
}

/// A new, empty file of mode 0600 in the data dir for a backup to be written to (a
/// backup holds every task's contents).
pub fn staging_file(data_dir: &Path) -> std::io::Result<PathBuf> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(std::io::Error::other)?;
    let path = data_dir.join(format!("backup-{}.partial", hex::encode(random)));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    Ok(path)
}

/// Removes staging files that no client will move (their server or client died). Runs
/// under the data-dir lock, when no backup can be under way.
pub fn remove_leftover_staging_files(data_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("backup-") && name.ends_with(".partial") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Whether a server holds the data dir (its lock file is locked).
pub fn server_running(data_dir: &Path) -> Result<bool, BackupError> {
    let path = data_dir.join("lock");
    let lock = match File::open(&path) {
        Ok(lock) => lock,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(on(&path)(e)),
    };
    match lock.try_lock_shared() {
        Ok(()) => Ok(false),
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(e)) => Err(on(&path)(e)),
    }
}

/// Moves the verified `staged` copy to `destination`, which must not exist (checked
/// atomically): a hard link when both are on one file system, else a copy that is
/// synced before the staged file goes.
pub fn move_into_place(
    staged: &Path,
    destination: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(), BackupError> {
    match std::fs::hard_link(staged, destination) {
        Ok(()) => {
            let _ = std::fs::remove_file(staged);
            return sync_parent(destination);
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let _ = std::fs::remove_file(staged);
            return Err(BackupError::Exists(destination.to_path_buf()));
        }
        // Another file system (or one without links): copy.
        Err(_) => {}
    }
    let copied = copy_synced(staged, destination, progress);
    let _ = std::fs::remove_file(staged);
    copied
}

/// Copies `from` to the new file `to` (mode 0600) and syncs it.
fn copy_synced(
    from: &Path,
    to: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(), BackupError> {
    let mut source = File::open(from).map_err(on(from))?;
    let total = source.metadata().map_err(on(from))?.len();
    let mut target = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(on(to))?;
    let mut buffer = vec![0u8; 1 << 20];
    let mut done = 0u64;
    loop {
        let read = source.read(&mut buffer).map_err(on(from))?;
        if read == 0 {
            break;
        }
        target.write_all(&buffer[..read]).map_err(on(to))?;
        done += read as u64;
        progress(done, total);
    }
    target.sync_all().map_err(on(to))?;
    sync_parent(to)
}

/// Makes a new directory entry durable.
fn sync_parent(path: &Path) -> Result<(), BackupError> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(on(parent))
}

/// Restores the backup `file` as the task store of `data_dir`. Refuses while a server
/// runs there (and holds the lock meanwhile, so none starts), and refuses to replace
/// an existing store without `force`. The file is verified before anything changes,
/// and the copy again before it replaces the store.
pub fn restore(
    file: &Path,
    data_dir: &Path,
    force: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(), BackupError> {
    verify_database_file(file)?;
    std::fs::create_dir_all(data_dir).map_err(on(data_dir))?;
    let lock_path = data_dir.join("lock");
    let lock = File::create(&lock_path).map_err(on(&lock_path))?;
    if lock.try_lock().is_err() {
        return Err(BackupError::ServerRunning(data_dir.to_path_buf()));
    }
    let database = data_dir.join(DATABASE);
    if database.exists() && !force {
        return Err(BackupError::StoreExists(data_dir.to_path_buf()));
    }
    let incoming = data_dir.join("tasks.db.restoring");
    let _ = std::fs::remove_file(&incoming);
    copy_synced(file, &incoming, progress)?;
    if let Err(why) = verify_database_file(&incoming) {
        let _ = std::fs::remove_file(&incoming);
        return Err(why.into());
    }
    // A log of the old database must never be applied to the restored one.
    for side in SIDE_FILES {
        let path = data_dir.join(side);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(on(&path)(e)),
            _ => {}
        }
    }
    give_to_data_dir_owner(data_dir, &[&incoming, &lock_path])?;
    std::fs::rename(&incoming, &database).map_err(on(&database))?;
    sync_parent(&database)?;
    // A restored database is whole: an unclean stop of the one it replaces is no
    // reason to refuse it.
    let mark = data_dir.join(taskd_sqlite::stop_mark::MARK);
    taskd_sqlite::stop_mark::clear(data_dir).map_err(on(&mark))?;
    drop(lock);
    Ok(())
}

/// After the CLI used the database itself: run as root, gives the store's files that
/// exist to the data dir's owner (SQLite may have created its log as root).
pub fn return_store_files(data_dir: &Path) -> Result<(), BackupError> {
    let files: Vec<PathBuf> = [DATABASE, SIDE_FILES[0], SIDE_FILES[1], "lock"]
        .iter()
        .map(|name| data_dir.join(name))
        .filter(|path| path.exists())
        .collect();
    let files: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    give_to_data_dir_owner(data_dir, &files)
}

/// Run as root (the usual way to reach a service's data), gives `files` to the owner
/// of the data dir: the server, running as that user, must be able to write them.
fn give_to_data_dir_owner(data_dir: &Path, files: &[&Path]) -> Result<(), BackupError> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let owner = std::fs::metadata(data_dir).map_err(on(data_dir))?;
    for file in files {
        match std::os::unix::fs::chown(file, Some(owner.uid()), Some(owner.gid())) {
            // SQLite removes its log when its last connection closes, which may be now.
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(on(file)(e)),
            _ => {}
        }
    }
    Ok(())
}
