//! What the engine reads of the configuration in force, as traits the server implements
//! (its live settings, swapped whole by a reload): the engine never knows the file
//! format, and a reload never has to tell it anything. Each [`SettingsSource::current`]
//! answers from one whole configuration, so one operation never mixes two.

use std::sync::Arc;

use taskd_protocol::Identity;
use taskd_tools::Registry;

use crate::config::TaskDefaults;
use crate::history::HistoryConfig;
use crate::output::OutputRules;
use crate::schedules::Schedule;
use crate::shares::{Quota, Share};

/// One configuration, as the engine reads it.
pub trait EngineSettings: Send + Sync {
    /// The tools served: what a claimed job runs, and the contract of its result.
    fn tools(&self) -> &Arc<Registry>;
    /// `[tasks]`: TTL and poll interval of tools that set none, the payload gate.
    fn tasks(&self) -> &TaskDefaults;
    /// The share of `identity`: its weight and priority in the queue, its quotas.
    fn share(&self, identity: &Identity) -> &Share;
    /// `[output]`: what is kept of a task's output.
    fn output(&self) -> &OutputRules;
    /// `[[schedules]]`: what the scheduler starts (see [`crate::schedules`]).
    fn schedules(&self) -> &[Schedule] {
        &[]
    }
    /// `[history]`: how long the operator's summary of a finished task is kept.
    fn history(&self) -> &HistoryConfig;
}

/// Where the engine finds the settings in force.
pub trait SettingsSource: Send + Sync {
    /// The settings in force now.
    fn current(&self) -> Arc<dyn EngineSettings>;
}

/// Where the engine reports an identity's request refused by one of its quotas (the
/// server's metrics count them).
pub trait QuotaCounter: Send + Sync {
    fn quota_refused(&self, quota: Quota, owner: &str);
}
