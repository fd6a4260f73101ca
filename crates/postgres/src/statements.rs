//! Every statement the store runs on a pooled connection goes through [`Db`], which
//! keeps the connection's [`Session`]: its prepared statements, and whether it has
//! carried a large message (which retires it, see [`LARGE_MESSAGE_BYTES`]).
//!
//! The client prepares a query given as text on every call: a round trip (Parse,
//! Describe) before the one that runs it, and a parse and plan on the server each time.
//! Every statement the store runs is a constant (`&'static str`), so each connection
//! prepares each one once and keeps it while the connection lives: every later run is
//! one round trip. A connection that dies takes its statements with it (the pool drops
//! it, and the fresh one prepares its own). Queries built at run time (the operator's
//! filtered listings) are prepared per call ([`Db::query_built`]).

use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{GenericClient, Row, Statement, Transaction};

/// A pooled connection that has sent parameters, or received a row, larger than this
/// is retired when it goes back to the pool (see `connection::Manager::has_broken`).
///
/// Why: the client keeps each buffer a message passed through (the one it encodes
/// requests in, the connection's write buffer, its read buffer) as large as the largest
/// message it ever held, for as long as the connection lives. Each pooled connection
/// that once wrote or read a 12 MB result kept 12-40 MB; with 16 of them a node held
/// 100 MB and more that nothing used (measured: 70 unread 12 MB `tasks/get` answers
/// peaked at 195-258 MiB, against 149 on SQLite). A fresh connection costs a few
/// milliseconds, little next to moving a megabyte, and only large payloads pay it.
pub const LARGE_MESSAGE_BYTES: usize = 1024 * 1024;

/// What a pooled connection keeps across the statements it runs.
#[derive(Default)]
pub struct Session {
    /// Its prepared statements, by their text.
    prepared: HashMap<&'static str, Statement>,
    /// Whether a statement sent or received more than [`LARGE_MESSAGE_BYTES`].
    carried_large: bool,
}

impl Session {
    /// Whether the connection should be retired rather than reused (see
    /// [`LARGE_MESSAGE_BYTES`]).
    pub fn carried_large(&self) -> bool {
        self.carried_large
    }
}

/// A statement parameter, and about how many bytes it takes in the message that sends
/// it (its share of the client's buffers).
pub trait Param: ToSql + Sync {
    fn wire_bytes(&self) -> usize;
}

macro_rules! fixed_size_params {
    ($($t:ty),*) => {
        $(impl Param for $t {
            fn wire_bytes(&self) -> usize {
                std::mem::size_of::<$t>()
            }
        })*
    };
}

fixed_size_params!(bool, i16, i32, i64, f64);

impl Param for &str {
    fn wire_bytes(&self) -> usize {
        self.len()
    }
}

impl Param for String {
    fn wire_bytes(&self) -> usize {
        self.len()
    }
}

impl Param for &[u8] {
    fn wire_bytes(&self) -> usize {
        self.len()
    }
}

impl Param for Vec<u8> {
    fn wire_bytes(&self) -> usize {
        self.len()
    }
}

impl<T: Param> Param for &T {
    fn wire_bytes(&self) -> usize {
        (**self).wire_bytes()
    }
}

impl<T: Param> Param for Option<T> {
    fn wire_bytes(&self) -> usize {
        self.as_ref().map_or(0, Param::wire_bytes)
    }
}

/// Arrays: each element, with its 4-byte length.
impl<T: Param> Param for Vec<T> {
    fn wire_bytes(&self) -> usize {
        self.iter().map(|element| element.wire_bytes() + 4).sum()
    }
}

impl<T: Param> Param for &[T] {
    fn wire_bytes(&self) -> usize {
        self.iter().map(|element| element.wire_bytes() + 4).sum()
    }
}

/// A client (a connection, or a transaction on one) with its connection's session.
pub struct Db<'s, C> {
    client: &'s mut C,
    session: &'s mut Session,
}

/// A transaction with its connection's session.
pub type Tx<'s, 't> = Db<'s, Transaction<'t>>;

type Params<'p> = &'p [&'p dyn Param];

impl<'s, C: GenericClient> Db<'s, C> {
    pub fn new(client: &'s mut C, session: &'s mut Session) -> Db<'s, C> {
        Db { client, session }
    }

    /// `sql`, prepared on this connection once.
    fn prepared(&mut self, sql: &'static str) -> Result<Statement, postgres::Error> {
        if let Some(statement) = self.session.prepared.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql)?;
        self.session.prepared.insert(sql, statement.clone());
        Ok(statement)
    }

    /// `params` as the client takes them, noting their size first (a statement that
    /// fails has still been written to the connection's buffers).
    fn sent<'p>(&mut self, params: Params<'p>) -> Vec<&'p (dyn ToSql + Sync)> {
        let bytes: usize = params.iter().map(|param| param.wire_bytes()).sum();
        self.session.carried_large |= bytes > LARGE_MESSAGE_BYTES;
        params
            .iter()
            .map(|param| *param as &(dyn ToSql + Sync))
            .collect()
    }

    /// Notes the size of the rows received.
    fn received<'r>(&mut self, rows: impl IntoIterator<Item = &'r Row>) {
        self.session.carried_large |= rows
            .into_iter()
            .any(|row| row.raw_size_bytes() > LARGE_MESSAGE_BYTES);
    }

    pub fn execute(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<u64, postgres::Error> {
        let statement = self.prepared(sql)?;
        let params = self.sent(params);
        self.client.execute(&statement, &params)
    }

    pub fn query(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Vec<Row>, postgres::Error> {
        let statement = self.prepared(sql)?;
        let params = self.sent(params);
        let rows = self.client.query(&statement, &params)?;
        self.received(&rows);
        Ok(rows)
    }

    pub fn query_one(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Row, postgres::Error> {
        let statement = self.prepared(sql)?;
        let params = self.sent(params);
        let row = self.client.query_one(&statement, &params)?;
        self.received([&row]);
        Ok(row)
    }

    pub fn query_opt(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Option<Row>, postgres::Error> {
        let statement = self.prepared(sql)?;
        let params = self.sent(params);
        let row = self.client.query_opt(&statement, &params)?;
        self.received(&row);
        Ok(row)
    }

    /// A query built at run time, prepared for this call only.
    pub fn query_built(
        &mut self,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Vec<Row>, postgres::Error> {
        let params = self.sent(params);
        let rows = self.client.query(sql, &params)?;
        self.received(&rows);
        Ok(rows)
    }

    /// [`Db::query_built`] for at most one row.
    pub fn query_opt_built(
        &mut self,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Option<Row>, postgres::Error> {
        let params = self.sent(params);
        let row = self.client.query_opt(sql, &params)?;
        self.received(&row);
        Ok(row)
    }

    /// Statements without parameters or rows (session settings), as text.
    pub fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error> {
        self.client.batch_execute(sql)
    }
}
