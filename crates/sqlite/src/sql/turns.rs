//! Turns (fair claiming, issue 29; the scheme is at `tasks::model::TURN`): the turn a
//! job takes when it joins the queue, and the turns of the jobs that wait for one until
//! their `run_after` passes. Claims take jobs in turn ([`super::attempts`]).

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};

/// The first turn still queued at `priority` (?1): one seek in `jobs_turns`.
const HEAD: &str = "SELECT turn FROM jobs WHERE state = 'queued' AND turn IS NOT NULL \
     AND priority = ?1 ORDER BY turn LIMIT 1";

/// The last turn `owner` (?1) was given at `priority` (?2) (schema.sql, migration 12):
/// one row of `identity_queue`.
const LAST: &str = "SELECT last_turn FROM identity_queue WHERE owner = ?1 AND priority = ?2";

/// The next turns of the jobs joining the queue in one write. A job's turn is its
/// owner's next at its priority: `stride` after the last turn the owner was given there
/// (a job of it queued or in service: start-time fair queuing, where a flow's next start
/// follows its previous one whether that is waiting or being served), and not before
/// the head of the queue there (an owner whose jobs are all gone starts at the head). Jobs given turns in the same write follow each other, in the order asked.
#[derive(Default)]
pub struct Turns {
    /// The next turn of each (owner, priority) asked for so far.
    next: HashMap<(String, i64), i64>,
}

impl Turns {
    /// The next turn of `owner` at `priority`, for a job of `stride`.
    pub fn take(
        &mut self,
        conn: &Connection,
        owner: &str,
        priority: i64,
        stride: i64,
    ) -> rusqlite::Result<i64> {
        let key = (owner.to_owned(), priority);
        let turn = match self.next.get(&key) {
            Some(&next) => next,
            None => {
                let head: Option<i64> = conn
                    .prepare_cached(HEAD)?
                    .query_row([priority], |row| row.get(0))
                    .optional()?;
                let last: Option<i64> = conn
                    .prepare_cached(LAST)?
                    .query_row(params![owner, priority], |row| row.get(0))
                    .optional()?
                    .flatten();
                let head = head.unwrap_or(0);
                last.map_or(head, |last| last.saturating_add(stride).max(head))
            }
        };
        self.next.insert(key, turn.saturating_add(stride));
        Ok(turn)
    }
}

/// Up to 64 jobs (each costs two index reads and a write, and claims come often: a
/// backlog of them is worked off a batch at a time) waiting for their turn whose
/// `run_after` (?1) has passed, oldest first. The limit is written out, not bound:
/// SQLite re-plans a statement whose bound LIMIT changed (SQLITE_ENABLE_STAT4 builds
/// take its value into account), and a re-prepare on every claim cost 11% of the
/// writer's time draining a backlog.
const DUE: &str = "SELECT task_id, owner, priority, stride FROM jobs \
     WHERE state = 'queued' AND turn IS NULL AND held = 0 AND run_after <= ?1 \
     ORDER BY run_after LIMIT 64";

/// Gives their turns to up to 64 jobs whose `run_after` has passed while they
/// waited for one, oldest first: one seek in `jobs_due` when there are none. Returns
/// how many.
pub fn give_due(conn: &Connection, now: i64) -> rusqlite::Result<usize> {
    let due: Vec<(String, String, i64, i64)> = conn
        .prepare_cached(DUE)?
        .query_map([now], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut turns = Turns::default();
    for (task_id, owner, priority, stride) in &due {
        let turn = turns.take(conn, owner, *priority, *stride)?;
        conn.prepare_cached("UPDATE OR FAIL jobs SET turn = ?2 WHERE task_id = ?1")?
            .execute(params![task_id, turn])?;
    }
    Ok(due.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::attempts::{claim, finish};
    use crate::sql::create::create_tasks;
    use crate::tests::{fresh_store, task_at};
    use taskd_engine::backend::Claimant;
    use taskd_engine::model::{Claim, Finish, NewTask};
    use taskd_protocol::Identity;

    /// Takes every job it is offered.
    struct TakesAll;

    impl Claimant for TakesAll {
        fn saturated(&self) -> Vec<String> {
            Vec::new()
        }

        fn take(&mut self, _: &Claim) -> bool {
            true
        }

        fn give_back(&mut self) {}

        fn rate_limit(&self, _: &Claim) -> Option<taskd_engine::flow::RateLimit> {
            None
        }

        fn rate_exhausted(&mut self, _: &str, _: i64) {}
    }

    /// A task of `principal` (ids sort in creation order, as real ones do).
    fn task_of(id: &str, principal: &str, weight: u32, priority: i64) -> NewTask {
        NewTask {
            identity: Identity {
                endpoint: "/mcp".into(),
                issuer: String::new(),
                tenant: String::new(),
                principal: principal.into(),
            },
            priority,
            stride: NewTask::stride(weight),
            ..task_at(id, 1)
        }
    }

    /// The task ids of `n` claims, one at a time, at `now`.
    fn claim_ids(conn: &Connection, n: usize, now: i64) -> rusqlite::Result<Vec<String>> {
        let mut ids = Vec::new();
        for _ in 0..n {
            let claimed = claim(conn, 1, now, 1000, || "t".into(), &mut TakesAll)?;
            ids.extend(claimed.into_iter().map(|claim| claim.task_id));
        }
        Ok(ids)
    }

    #[test]
    fn identities_take_turns_and_each_ones_jobs_keep_their_order() {
        let (_dir, store) = fresh_store();
        let order = store
            .write(|conn| {
                let a: Vec<NewTask> = (1..=5)
                    .map(|i| task_of(&format!("1a{i}"), "a", 1, 0))
                    .collect();
                create_tasks(conn, &a)?;
                create_tasks(
                    conn,
                    &[task_of("2b1", "b", 1, 0), task_of("2b2", "b", 1, 0)],
                )?;
                create_tasks(conn, &[task_of("3c1", "c", 1, 0)])?;
                claim_ids(conn, 9, 10)
            })
            .unwrap();
        // B and C arrive behind A's five and start at the head of the queue.
        assert_eq!(
            order,
            ["1a1", "2b1", "3c1", "1a2", "2b2", "1a3", "1a4", "1a5"]
        );
    }

    #[test]
    fn a_weight_of_two_takes_two_turns_to_one_and_priority_goes_first() {
        let (_dir, store) = fresh_store();
        let order = store
            .write(|conn| {
                let heavy: Vec<NewTask> = (1..=4)
                    .map(|i| task_of(&format!("1h{i}"), "heavy", 2, 0))
                    .collect();
                create_tasks(conn, &heavy)?;
                let light: Vec<NewTask> = (1..=3)
                    .map(|i| task_of(&format!("2l{i}"), "light", 1, 0))
                    .collect();
                create_tasks(conn, &light)?;
                // Created last, claimed first: a higher priority.
                create_tasks(conn, &[task_of("3urgent", "light", 1, 5)])?;
                claim_ids(conn, 8, 10)
            })
            .unwrap();
        assert_eq!(
            order,
            ["3urgent", "1h1", "2l1", "1h2", "1h3", "2l2", "1h4", "2l3"]
        );
    }

    #[test]
    fn a_retry_waits_for_its_backoff_then_takes_its_identitys_next_turn() {
        let (_dir, store) = fresh_store();
        let (first, later) = store
            .write(|conn| {
                let a: Vec<NewTask> = (1..=3)
                    .map(|i| task_of(&format!("1a{i}"), "a", 1, 0))
                    .collect();
                create_tasks(conn, &a)?;
                create_tasks(conn, &[task_of("2b1", "b", 1, 0)])?;
                let failed = claim(conn, 1, 10, 1000, || "lease".into(), &mut TakesAll)?;
                assert_eq!(failed[0].task_id, "1a1");
                let retry = Finish::Retry {
                    reason: "boom".into(),
                };
                // task_at's backoff is 10 ms: ready again at 30.
                assert!(finish(conn, "1a1", "lease", &retry, 20)?);
                let turn: Option<i64> =
                    conn.query_row("SELECT turn FROM jobs WHERE task_id = '1a1'", [], |r| {
                        r.get(0)
                    })?;
                assert_eq!(turn, None, "no turn while it waits");
                // Before its backoff ends, the others go on without reading it.
                let first = claim_ids(conn, 1, 25)?;
                let later = claim_ids(conn, 4, 30)?;
                Ok((first, later))
            })
            .unwrap();
        assert_eq!(first, ["2b1"]);
        // Behind A's queued jobs (B has none left): A's order is kept from there.
        assert_eq!(later, ["1a2", "1a3", "1a1"]);
    }

    #[test]
    fn the_identity_queue_counts_live_jobs_and_forgets_identities_without_any() {
        use crate::sql::upkeep::{live_tasks, prune_identity_queue};
        let (_dir, store) = fresh_store();
        store
            .write(|conn| {
                let a: Vec<NewTask> = (1..=3)
                    .map(|i| task_of(&format!("1a{i}"), "a", 1, 0))
                    .collect();
                create_tasks(conn, &a)?;
                let owner = a[0].identity.key();
                assert_eq!(live_tasks(conn, &owner, 100)?, 3);
                assert_eq!(live_tasks(conn, &owner, 2)?, 2, "capped at the quota");
                let done = Finish::Completed {
                    result: "{}".into(),
                };
                for _ in 0..3 {
                    let claimed = claim(conn, 1, 10, 1000, || "lease".into(), &mut TakesAll)?;
                    assert!(finish(conn, &claimed[0].task_id, "lease", &done, 11)?);
                }
                assert_eq!(live_tasks(conn, &owner, 100)?, 0);
                assert_eq!(prune_identity_queue(conn)?, 1);
                assert_eq!(prune_identity_queue(conn)?, 0);
                // Forgotten, a's next job starts at the head of the queue, behind b's.
                create_tasks(
                    conn,
                    &[task_of("2b1", "b", 1, 0), task_of("2b2", "b", 1, 0)],
                )?;
                create_tasks(conn, &[task_of("3a4", "a", 1, 0)])?;
                assert_eq!(claim_ids(conn, 3, 20)?, ["2b1", "3a4", "2b2"]);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn a_claim_reads_the_same_few_rows_behind_one_identity_or_a_thousand() {
        let steps = |owners: usize| -> u64 {
            let (_dir, store) = fresh_store();
            store
                .write(move |conn| {
                    let tasks: Vec<NewTask> = (0..10_000)
                        .map(|i| task_of(&format!("{i:05}"), &format!("o{}", i % owners), 1, 0))
                        .collect();
                    create_tasks(conn, &tasks)?;
                    // The turns of a thousand owners' first jobs are all the head's.
                    let heads: i64 =
                        conn.query_row("SELECT COUNT(*) FROM jobs WHERE turn = 0", [], |r| {
                            r.get(0)
                        })?;
                    assert_eq!(heads as usize, owners);
                    let mut statement = conn.prepare_cached(
                        "SELECT jobs.task_id FROM jobs JOIN tasks ON tasks.id = jobs.task_id \
                         WHERE jobs.state = 'queued' AND jobs.turn IS NOT NULL \
                         ORDER BY jobs.priority DESC, jobs.turn, jobs.task_id LIMIT 1",
                    )?;
                    statement.query_row([], |_| Ok(()))?;
                    Ok(statement.get_status(rusqlite::StatementStatus::VmStep) as u64)
                })
                .unwrap()
        };
        let (one, thousand) = (steps(1), steps(1000));
        assert!(one < 100 && thousand < 100, "{one} and {thousand} steps");
    }
}
