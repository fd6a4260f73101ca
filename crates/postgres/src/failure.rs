//! Why a statement failed ([`Failure`]) and what that means to the engine: retry on a
//! fresh connection, report the database out of reach, or one of [`StoreError`]'s kinds;
//! and the node's view of the database's reachability ([`Health`]) that `/healthz`
//! reports.

use std::sync::Mutex;

use taskd_engine::backend::StoreError;

/// Why a statement failed: the database's error, or a row it should not hold.
#[derive(Debug)]
pub(crate) enum Failure {
    Db(postgres::Error),
    Data(String),
}

impl From<postgres::Error> for Failure {
    fn from(error: postgres::Error) -> Self {
        Failure::Db(error)
    }
}

impl Failure {
    /// Whether the transaction surely did not commit and may run again on another
    /// connection: the connection was lost, or the database gave up on it (deadlock,
    /// serialization failure, shutting down).
    pub(crate) fn retryable(&self) -> bool {
        let Failure::Db(error) = self else {
            return false;
        };
        if error.is_closed() {
            return true;
        }
        match error.code() {
            Some(code) => {
                let code = code.code();
                code.starts_with("08") || ["40001", "40P01", "57P01", "57P02"].contains(&code)
            }
            // Not from the server: the connection's socket failed.
            None => error.as_db_error().is_none(),
        }
    }

    /// Whether the failure says the database is out of reach.
    pub(crate) fn is_unreachable(&self) -> bool {
        match self {
            Failure::Db(error) => {
                error.is_closed()
                    || error.code().is_some_and(|code| {
                        let code = code.code();
                        code.starts_with("08") || code.starts_with("57P")
                    })
                    || (error.code().is_none() && error.as_db_error().is_none())
            }
            Failure::Data(_) => false,
        }
    }

    /// Sorts it into what the engine can act on.
    pub(crate) fn classify(self) -> StoreError {
        match self {
            Failure::Data(detail) => StoreError::Corrupt(detail.into()),
            Failure::Db(error) => {
                let code = error.code().map(|code| code.code().to_owned());
                match code.as_deref() {
                    Some("53100") => StoreError::Full(Box::new(error)),
                    Some("25006") => StoreError::ReadOnly(Box::new(error)),
                    Some("XX001") | Some("XX002") => StoreError::Corrupt(Box::new(error)),
                    Some(code)
                        if code.starts_with("08")
                            || code.starts_with("53")
                            || code.starts_with("57")
                            || code.starts_with("40")
                            || code == "55P03" =>
                    {
                        StoreError::Unavailable(Box::new(error))
                    }
                    Some(_) => StoreError::Other(Box::new(error)),
                    None => StoreError::Unavailable(Box::new(error)),
                }
            }
        }
    }
}

/// Whether the database is reachable, as the listener and the last failures found.
#[derive(Default)]
pub(crate) struct Health {
    problem: Mutex<Option<String>>,
}

impl Health {
    pub(crate) fn set(&self, problem: Option<String>) {
        *self.problem.lock().unwrap_or_else(|p| p.into_inner()) = problem;
    }

    pub(crate) fn problem(&self) -> Option<String> {
        self.problem
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
