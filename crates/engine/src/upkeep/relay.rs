//! The outbox relay: after every commit it reads the outbox past its cursor and hands
//! each changed task id to the notification hub; the cursor marks rows as delivered.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use crossbeam_channel::Receiver;

use super::BATCH;
use crate::backend::TaskStore;
use taskd_notifications::Hub;

pub(super) fn relay(
    store: &dyn TaskStore,
    hub: &Hub,
    delivered: &AtomicI64,
    commits: &Receiver<()>,
    stopping: &AtomicBool,
    stopped: &Receiver<()>,
) {
    while !stopping.load(Ordering::Acquire) {
        // While nobody follows a task, commit pings stay unread: the channel holds one,
        // so once a subscription opens, the first receive returns at once. (A closed
        // hub, at shutdown, wakes this wait.)
        if !hub.await_followers(Duration::from_millis(500)) {
            if hub.is_closed() {
                // Shutting down: nobody will follow a task again. Wait for the stop.
                let _ = stopped.recv();
                break;
            }
            continue;
        }
        crossbeam_channel::select! {
            recv(commits) -> _ => {}
            recv(stopped) -> _ => break,
            default(Duration::from_millis(500)) => {}
        }
        loop {
            let after = delivered.load(Ordering::Acquire);
            let rows = match store.outbox_after(after, BATCH) {
                Ok(rows) => rows,
                Err(error) => {
                    log::error!("reading the outbox: {error}");
                    break;
                }
            };
            let Some(&(last, _)) = rows.last() else {
                break;
            };
            for (seq, task_id) in &rows {
                hub.publish_task_changed(task_id, *seq);
            }
            delivered.fetch_max(last, Ordering::AcqRel);
            if rows.len() < BATCH {
                break;
            }
        }
    }
}

/// Counts every outbox row as delivered when no subscription follows a task, so that
/// the janitor prunes the rows the relay did not read.
///
/// The newest row is read *before* looking for followers. A subscription open when
/// one of those rows was committed and still open now is seen, and nothing is skipped.
/// One opened since then asked for changes after its own start only: the rows skipped
/// were all committed before the look.
pub(super) fn skip_unheard(store: &dyn TaskStore, hub: &Hub, delivered: &AtomicI64) {
    let newest = match store.outbox_newest() {
        Ok(newest) => newest,
        Err(error) => {
            log::error!("reading the outbox: {error}");
            return;
        }
    };
    if !hub.follows_any_task() {
        delivered.fetch_max(newest, Ordering::AcqRel);
    }
}
