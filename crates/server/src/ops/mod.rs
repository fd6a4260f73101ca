//! Operating the service: what systemd sees of it ([`systemd`]: readiness, status and a
//! watchdog fed only while the loops in `liveness` make progress), and the operator
//! interface — an admin socket the server answers on ([`admin`]), the commands that use
//! it or, with no server running, the database directly ([`cli`]), and backup and
//! restore files ([`backup`]), and the move of a SQLite store into PostgreSQL
//! ([`copy_store`]).

pub mod admin;
pub mod backup;
pub mod cli;
pub mod copy_store;
pub mod reload;
pub mod systemd;
