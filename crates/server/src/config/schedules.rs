//! `[[schedules]]` (issue 49): each entry typed by the engine
//! ([`taskd_engine::schedules::ScheduleConfig`]) and checked here, where what serde
//! cannot say is said: one timing, a name of its own, a time zone that exists. Whether
//! its tool is served and takes its arguments is checked where the tools are known
//! (`crate::registration::schedules`).

use std::collections::BTreeSet;

use taskd_engine::schedules::Schedule;

use super::{Config, ConfigError};

/// How errors name the `index`th `[[schedules]]` entry.
pub(crate) fn schedule_label(index: usize, name: &str) -> String {
    format!("schedules[{index}] (\"{name}\")")
}

/// The schedules of `config`, built (their tasks bound to `server.endpoint`); two of
/// one name are refused.
pub fn built(config: &Config) -> Result<Vec<Schedule>, ConfigError> {
    let mut names = BTreeSet::new();
    config
        .schedules
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            let label = schedule_label(index, &entry.name);
            let schedule = Schedule::build(entry, &config.server.endpoint).map_err(|error| {
                ConfigError::ScheduleEntry {
                    label: label.clone(),
                    detail: error.to_string(),
                }
            })?;
            if !names.insert(schedule.name.clone()) {
                return Err(ConfigError::ScheduleEntry {
                    label,
                    detail: "another schedule has this name".into(),
                });
            }
            Ok(schedule)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn entries_are_checked_and_named_in_errors() {
        let config = Config::parse(
            "[[schedules]]\nname = \"sync\"\ntool = \"echo\"\nevery = \"5m\"\n\
             arguments = { text = \"hi\" }\n\
             [[schedules]]\nname = \"nightly\"\ntool = \"echo\"\ncron = \"0 3 * * *\"\n\
             timezone = \"Europe/Berlin\"\nprincipal = \"ops\"\ntenant = \"acme\"\n\
             missed = \"run_once\"\noverlap = \"queue\"\n",
        )
        .unwrap();
        let built = super::built(&config).unwrap();
        assert_eq!(built.len(), 2);
        assert_eq!(built[1].identity.principal, "ops");
        assert_eq!(built[0].arguments["text"], "hi");
        for (text, expected) in [
            (
                "[[schedules]]\nname = \"a\"\ntool = \"t\"\nevery = \"1s\"\n\
                 [[schedules]]\nname = \"a\"\ntool = \"t\"\nevery = \"2s\"\n",
                "schedules[1] (\"a\"): another schedule has this name",
            ),
            (
                "[[schedules]]\nname = \"a\"\ntool = \"t\"\ncron = \"* * *\"\n",
                "schedules[0] (\"a\"): cron",
            ),
            (
                "[[schedules]]\nname = \"a\"\ntool = \"t\"\ncron = \"@daily\"\ntimezone = \"Nowhere/Else\"\n",
                "schedules[0] (\"a\"): timezone \"Nowhere/Else\"",
            ),
            (
                "[[schedules]]\nname = \"a\"\ntool = \"t\"\n",
                "schedules[0] (\"a\"): give cron",
            ),
        ] {
            let error = Config::parse(text).unwrap_err().to_string();
            assert!(error.starts_with(expected), "{error}");
        }
        let unknown = Config::parse("[[schedules]]\nname = \"a\"\ntool = \"t\"\nevry = \"1s\"\n");
        assert!(unknown.unwrap_err().to_string().contains("unknown field"));
    }
}
