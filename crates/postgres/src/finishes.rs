//! Workers' finishes, in groups: the attempts that end at about the same time on a
//! node share one transaction ([`super::groups`]), and so do the claims of their
//! workers' next jobs.
//!
//! A no-op task on this backend used to cost a transaction of its own to end and
//! claim the next: seven round trips, each a statement PostgreSQL parses, plans and
//! runs, and a commit. In a group, the same few statements end every attempt
//! (`sql::attempts::finish`: the task rows locked, the job rows locked, one statement
//! for every terminal outcome), and one claim statement takes the next jobs of every
//! worker that asked. What each worker is told is what it was told alone: whether its
//! outcome was applied (its lease was still its own) and which jobs it claimed, after
//! the commit.

use super::groups::failed_together;
use super::sql::{attempts, output};
use super::statements::Tx;
use super::{Failure, Store, Wake};
use taskd_engine::backend::{ClaimRequest, Claimant, Finished, StoreError};
use taskd_engine::flow::RateLimit;
use taskd_engine::model::{Claim, Finish, Lease};
use taskd_engine::output::OutputBatch;

/// Most finishes in one transaction: more than a node's workers, so that all of them
/// may share one.
pub(super) const FINISHES_GROUP: usize = 256;

/// A worker's finish waiting for its group's transaction: its attempt's end, and the
/// claim of its next job, if it wants one.
pub(super) struct Finishing {
    pub end: (Lease, Finish),
    /// The attempt's last output, written with its outcome.
    pub output: Option<OutputBatch>,
    pub then_claim: Option<ClaimRequest>,
}

impl Store {
    /// Ends a group of attempts and claims the next jobs their workers asked for, in
    /// one transaction; the answer of each, in order.
    pub(super) fn finish_group(&self, group: Vec<Finishing>) -> Vec<Result<Finished, StoreError>> {
        let mut ends = Vec::with_capacity(group.len());
        let mut outputs = Vec::with_capacity(group.len());
        let mut requests = Vec::with_capacity(group.len());
        for finishing in group {
            ends.push(finishing.end);
            outputs.push(finishing.output);
            requests.push(finishing.then_claim);
        }
        let grouped = self.once(Wake::Relays, |tx| {
            finish_and_claim(tx, &self.run, &ends, &outputs, &mut requests)
        });
        match grouped {
            Ok(finished) => finished.into_iter().map(Ok).collect(),
            // A failure that may be one attempt's own (a result the database refuses):
            // each alone, so that it fails only its own finish. The claims of the
            // group were rolled back with it: their claimants let go of them first.
            Err(error) if ends.len() > 1 && !error.is_temporary() => {
                for request in requests.iter_mut().flatten() {
                    request.claimant.give_back();
                }
                ends.iter()
                    .zip(&outputs)
                    .zip(requests.iter_mut())
                    .map(|((end, output), request)| {
                        self.once(Wake::Relays, |tx| {
                            finish_and_claim(
                                tx,
                                &self.run,
                                std::slice::from_ref(end),
                                std::slice::from_ref(output),
                                std::slice::from_mut(request),
                            )
                        })
                        .and_then(|mut finished| {
                            finished.pop().ok_or_else(|| {
                                StoreError::Corrupt("a finish without its answer".into())
                            })
                        })
                    })
                    .collect()
            }
            Err(error) => failed_together(error, ends.len()),
        }
    }
}

/// Ends `ends` (fenced, see [`attempts::finish`]), then claims the next jobs of the
/// workers that asked (`requests`, one for each end) in one claim for them all: each
/// claimed job goes to the first of them with room left. The answer of each, in order.
fn finish_and_claim(
    tx: &mut Tx<'_, '_>,
    node: &str,
    ends: &[(Lease, Finish)],
    outputs: &[Option<OutputBatch>],
    requests: &mut [Option<ClaimRequest>],
) -> Result<Vec<Finished>, Failure> {
    let applied = attempts::finish(tx, ends)?;
    // Each attempt's last output, fenced by the same lease its outcome was.
    for ((end, output), applied) in ends.iter().zip(outputs).zip(&applied) {
        if let (true, Some(output)) = (*applied, output) {
            output::append(tx, &end.0.task_id, output)?;
        }
    }
    // The group's workers share one lease length (their pool's); the shortest is kept
    // if not, since a lease keeper renews it anyway.
    let lease_ms = requests
        .iter()
        .flatten()
        .map(|request| request.lease_ms)
        .min()
        .unwrap_or_default();
    let mut group = GroupClaimant {
        members: requests
            .iter_mut()
            .enumerate()
            .filter_map(|(index, request)| {
                let request = request.as_mut()?;
                Some(Member {
                    index,
                    room: request.limit,
                    claimant: request.claimant.as_mut(),
                })
            })
            .collect(),
        taken_by: Vec::new(),
    };
    let mut next: Vec<Vec<Claim>> = ends.iter().map(|_| Vec::new()).collect();
    let limit: usize = group.members.iter().map(|member| member.room).sum();
    if limit > 0 {
        let claims = attempts::claim(tx, node, limit, lease_ms, &mut group)?;
        for (claim, index) in claims.into_iter().zip(group.taken_by) {
            next[index].push(claim);
        }
    }
    Ok(applied
        .into_iter()
        .zip(next)
        .map(|(applied, next)| Finished { applied, next })
        .collect())
}

/// The claimants of a group's workers as one: a job goes to the first with room left.
struct GroupClaimant<'r> {
    members: Vec<Member<'r>>,
    /// For each job taken so far, in order, the index of the worker that took it.
    taken_by: Vec<usize>,
}

struct Member<'r> {
    /// The worker's place in its group.
    index: usize,
    /// How many more jobs it asked for.
    room: usize,
    claimant: &'r mut dyn Claimant,
}

impl Claimant for GroupClaimant<'_> {
    fn saturated(&self) -> Vec<String> {
        let mut tools: Vec<String> = Vec::new();
        for member in &self.members {
            for tool in member.claimant.saturated() {
                if !tools.contains(&tool) {
                    tools.push(tool);
                }
            }
        }
        tools
    }

    fn take(&mut self, claim: &Claim) -> bool {
        let Some(member) = self.members.iter_mut().find(|member| member.room > 0) else {
            return false;
        };
        if !member.claimant.take(claim) {
            return false;
        }
        member.room -= 1;
        self.taken_by.push(member.index);
        true
    }

    /// The workers of one pool see the same tools: the first one answers.
    fn rate_limit(&self, claim: &Claim) -> Option<RateLimit> {
        self.members.first()?.claimant.rate_limit(claim)
    }

    fn rate_exhausted(&mut self, tool: &str, until: i64) {
        for member in &mut self.members {
            member.claimant.rate_exhausted(tool, until);
        }
    }

    fn give_back(&mut self) {
        for member in &mut self.members {
            member.claimant.give_back();
        }
        for index in self.taken_by.drain(..) {
            if let Some(member) = self.members.iter_mut().find(|m| m.index == index) {
                member.room += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker's claimant: takes every job but those of `full`, and remembers them.
    #[derive(Default)]
    struct Recording {
        full: Option<&'static str>,
        taken: Vec<String>,
        given_back: usize,
    }

    impl Claimant for Recording {
        fn saturated(&self) -> Vec<String> {
            self.full.iter().map(|tool| tool.to_string()).collect()
        }

        fn take(&mut self, claim: &Claim) -> bool {
            if self.full == Some(claim.tool.as_str()) {
                return false;
            }
            self.taken.push(claim.task_id.clone());
            true
        }

        fn give_back(&mut self) {
            self.given_back += self.taken.len();
            self.taken.clear();
        }

        fn rate_limit(&self, _: &Claim) -> Option<RateLimit> {
            None
        }

        fn rate_exhausted(&mut self, _: &str, _: i64) {}
    }

    #[test]
    fn a_groups_jobs_go_to_its_workers_in_turn_each_up_to_what_it_asked() {
        let (mut first, mut second) = (Recording::default(), Recording::default());
        second.full = Some("slow");
        let mut group = GroupClaimant {
            members: vec![
                Member {
                    index: 0,
                    room: 1,
                    claimant: &mut first,
                },
                // The worker at index 1 asked for no job: it is not a member.
                Member {
                    index: 2,
                    room: 2,
                    claimant: &mut second,
                },
            ],
            taken_by: Vec::new(),
        };
        assert_eq!(group.saturated(), vec!["slow".to_owned()]);
        assert!(group.take(&Claim::of("a", "fast")));
        assert!(group.take(&Claim::of("b", "fast")));
        assert!(
            !group.take(&Claim::of("c", "slow")),
            "the worker with room refuses"
        );
        assert!(group.take(&Claim::of("d", "fast")));
        assert!(
            !group.take(&Claim::of("e", "fast")),
            "no room left in the group"
        );
        assert_eq!(group.taken_by, vec![0, 2, 2]);

        // Rolled back: every worker lets go of its jobs, and has its room again.
        group.give_back();
        assert!(group.taken_by.is_empty());
        assert_eq!(
            group.members.iter().map(|m| m.room).collect::<Vec<_>>(),
            vec![1, 2]
        );
        drop(group);
        assert_eq!((first.given_back, second.given_back), (1, 2));
        assert!(first.taken.is_empty() && second.taken.is_empty());
    }
}
