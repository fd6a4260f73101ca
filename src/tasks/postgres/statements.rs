//! Prepared statements, cached per pooled connection.
//!
//! The client prepares a query given as text on every call: a round trip (Parse,
//! Describe) before the one that runs it, and a parse and plan on the server each time.
//! Every statement the store runs is a constant (`&'static str`), so each connection
//! prepares each one once and keeps it while the connection lives: every later run is
//! one round trip. A connection that dies takes its statements with it (the pool drops
//! it, and the fresh one prepares its own). Queries built at run time (the operator's
//! filtered listings) go through [`Db::uncached`].

use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{GenericClient, Row, Statement, Transaction};

/// A connection's prepared statements, by their text.
#[derive(Default)]
pub struct Statements(HashMap<&'static str, Statement>);

/// A client (a connection, or a transaction on one) with its connection's statements.
pub struct Db<'s, C> {
    client: &'s mut C,
    statements: &'s mut Statements,
}

/// A transaction with its connection's statements.
pub type Tx<'s, 't> = Db<'s, Transaction<'t>>;

type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

impl<'s, C: GenericClient> Db<'s, C> {
    pub fn new(client: &'s mut C, statements: &'s mut Statements) -> Db<'s, C> {
        Db { client, statements }
    }

    /// `sql`, prepared on this connection once.
    fn prepared(&mut self, sql: &'static str) -> Result<Statement, postgres::Error> {
        if let Some(statement) = self.statements.0.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql)?;
        self.statements.0.insert(sql, statement.clone());
        Ok(statement)
    }

    pub fn execute(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<u64, postgres::Error> {
        let statement = self.prepared(sql)?;
        self.client.execute(&statement, params)
    }

    pub fn query(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Vec<Row>, postgres::Error> {
        let statement = self.prepared(sql)?;
        self.client.query(&statement, params)
    }

    pub fn query_one(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Row, postgres::Error> {
        let statement = self.prepared(sql)?;
        self.client.query_one(&statement, params)
    }

    pub fn query_opt(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Option<Row>, postgres::Error> {
        let statement = self.prepared(sql)?;
        self.client.query_opt(&statement, params)
    }

    /// The client itself, for a query built at run time (prepared per call).
    pub fn uncached(&mut self) -> &mut C {
        self.client
    }
}
