//! The notifier: sends the `NOTIFY`s that wake every node after a committed change, on
//! a connection of its own, so that the change's caller does not wait a round trip for
//! them and its pooled connection goes back to the pool at once.
//!
//! Changes committed while a `NOTIFY` is on its way are announced together by the next
//! one: a relay reads every outbox row past its cursor whatever woke it, and a
//! dispatcher claims whatever is ready. Under load a node so sends far fewer
//! notifications than it commits changes, and every node's listener wakes less often.
//! A notification lost with the connection is covered as before: relays read the
//! outbox at least every half second, and dispatchers poll.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use super::connection::connect;

/// What is owed: a wake-up of the relays, of the dispatchers, or both.
#[derive(Default)]
struct Owed {
    relays: AtomicBool,
    workers: AtomicBool,
}

pub(super) struct Notifier {
    owed: Arc<Owed>,
    ping: Sender<()>,
}

impl Notifier {
    /// Starts the notifier's thread; it ends once the notifier is dropped.
    pub fn start(settings: postgres::Config) -> std::io::Result<Notifier> {
        let owed = Arc::new(Owed::default());
        let (ping, pinged) = crossbeam_channel::bounded(1);
        let sending = Arc::clone(&owed);
        std::thread::Builder::new()
            .name("pg-notifier".into())
            .spawn(move || send_owed(&settings, &sending, &pinged))?;
        Ok(Notifier { owed, ping })
    }

    /// Wakes every node's relay, and with `workers` every node's dispatcher too, soon
    /// (a committed change calls this).
    pub fn wake(&self, workers: bool) {
        if workers {
            self.owed.workers.store(true, Ordering::Release);
        }
        self.owed.relays.store(true, Ordering::Release);
        let _ = self.ping.try_send(());
    }
}

fn send_owed(settings: &postgres::Config, owed: &Owed, pinged: &Receiver<()>) {
    let mut client = None;
    // Ends when the notifier (the store) is dropped.
    while pinged.recv().is_ok() {
        let workers = owed.workers.swap(false, Ordering::AcqRel);
        if !owed.relays.swap(false, Ordering::AcqRel) && !workers {
            continue;
        }
        let notify = if workers {
            "NOTIFY mcp_taskd_outbox; NOTIFY mcp_taskd_jobs"
        } else {
            "NOTIFY mcp_taskd_outbox"
        };
        if client.is_none() {
            client = connect(settings)
                .map_err(|error| log::debug!("connecting the notifier: {error}"))
                .ok();
        }
        if let Some(connected) = client.as_mut() {
            if let Err(error) = connected.batch_execute(notify) {
                log::debug!("waking the nodes: {error}");
                client = None;
            }
        }
    }
}
