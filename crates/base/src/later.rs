//! [`Later`]: a value another thread will produce, handed to whoever asks for it.
//!
//! A task creation is answered only after its commit, but the request thread that
//! submitted it need not sleep until then: the store hands the committed row to a
//! [`Later`], the protocol layer maps it to a `CreateTaskResult`, and the transport
//! attaches the function that writes the HTTP response. Whichever side comes second —
//! the value or the function — runs the function, on its own thread.

use std::sync::{Arc, Mutex};
use std::time::Duration;

type Callback<T> = Box<dyn FnOnce(T) + Send>;

enum State<T> {
    /// Neither the value nor the callback yet.
    Empty,
    Value(T),
    Callback(Callback<T>),
    /// Both met (or the producer went away); nothing more to do.
    Done,
}

/// The receiving end: attach what to do with the value.
pub struct Later<T> {
    state: Arc<Mutex<State<T>>>,
}

/// The producing end: fulfil it once. Dropping it unfulfilled fulfils it with the
/// value `on_drop` built.
pub struct Fulfil<T> {
    state: Arc<Mutex<State<T>>>,
    on_drop: Option<fn() -> T>,
}

/// A linked pair; `on_drop` is the value the receiver gets if the producer is dropped
/// without fulfilling (a writer that stopped, a panicking continuation).
pub fn later<T>(on_drop: fn() -> T) -> (Fulfil<T>, Later<T>) {
    let state = Arc::new(Mutex::new(State::Empty));
    (
        Fulfil {
            state: Arc::clone(&state),
            on_drop: Some(on_drop),
        },
        Later { state },
    )
}

fn lock<T>(state: &Mutex<State<T>>) -> std::sync::MutexGuard<'_, State<T>> {
    // The state is replaced whole under the lock: a poisoned lock is still consistent.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T: Send + 'static> Later<T> {
    /// A value that is already there.
    pub fn ready(value: T) -> Later<T> {
        Later {
            state: Arc::new(Mutex::new(State::Value(value))),
        }
    }

    /// Runs `callback` with the value: now, on this thread, if it is there; otherwise
    /// on the producer's thread when it arrives.
    pub fn then(self, callback: impl FnOnce(T) + Send + 'static) {
        let mut state = lock(&self.state);
        match std::mem::replace(&mut *state, State::Done) {
            State::Value(value) => {
                drop(state);
                callback(value);
            }
            State::Empty => *state = State::Callback(Box::new(callback)),
            State::Callback(_) | State::Done => {}
        }
    }

    /// Blocks this thread until the value arrives, for at most `limit` (`None` when the
    /// limit passes first): for a call that must answer with it, such as a legacy or
    /// bridged call waiting for its task's creation to commit.
    pub fn wait(self, limit: Duration) -> Option<T> {
        let (sender, receiver) = crossbeam_channel::bounded(1);
        self.then(move |value| {
            let _ = sender.send(value);
        });
        receiver.recv_timeout(limit).ok()
    }

    /// A `Later` of `f(value)`.
    pub fn map<U: Send + 'static>(self, f: impl FnOnce(T) -> U + Send + 'static) -> Later<U> {
        let mapped = Later {
            state: Arc::new(Mutex::new(State::Empty)),
        };
        let producer = Fulfil {
            state: Arc::clone(&mapped.state),
            on_drop: None,
        };
        self.then(move |value| producer.fulfil(f(value)));
        mapped
    }
}

impl<T> Fulfil<T> {
    pub fn fulfil(mut self, value: T) {
        self.on_drop = None;
        deliver(&self.state, value);
    }
}

fn deliver<T>(state: &Mutex<State<T>>, value: T) {
    let mut guard = lock(state);
    match std::mem::replace(&mut *guard, State::Done) {
        State::Callback(callback) => {
            drop(guard);
            callback(value);
        }
        State::Empty => *guard = State::Value(value),
        State::Value(_) | State::Done => {}
    }
}

impl<T> Drop for Fulfil<T> {
    fn drop(&mut self) {
        if let Some(on_drop) = self.on_drop.take() {
            deliver(&self.state, on_drop());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn wait_returns_the_value_or_none_once_the_limit_passes() {
        let (fulfil, value) = later::<u32>(|| 0);
        let producer = std::thread::spawn(move || fulfil.fulfil(7));
        assert_eq!(value.wait(Duration::from_secs(10)), Some(7));
        producer.join().unwrap();

        let (_kept, never) = later::<u32>(|| 0);
        assert_eq!(never.wait(Duration::from_millis(10)), None);
    }

    #[test]
    fn the_callback_runs_once_whichever_side_comes_first() {
        let (tx, rx) = mpsc::channel();
        let (fulfil, value) = later(|| 0);
        let sender = tx.clone();
        value.then(move |v| sender.send(v).unwrap());
        fulfil.fulfil(1);
        let (fulfil, value) = later(|| 0);
        fulfil.fulfil(2);
        let sender = tx.clone();
        value.map(|v| v * 10).then(move |v| sender.send(v).unwrap());
        let (fulfil, value) = later(|| 3);
        drop(fulfil);
        value.then(move |v| tx.send(v).unwrap());
        assert_eq!(rx.iter().collect::<Vec<_>>(), vec![1, 20, 3]);
    }
}
