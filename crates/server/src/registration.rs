//! What a configuration offers, built where the server is assembled: its command tools
//! (each program resolved and checked once), its upstream servers, and every tool,
//! resource and prompt registered into one [`Registry`] and [`Catalog`] — for the
//! server, `check-config` and the offline operator commands alike. The configuration
//! itself (`crate::config`) is data: it types these declarations and builds nothing.

use std::collections::BTreeSet;
use std::sync::Arc;

use taskd_notifications::Hub;
use taskd_tools::catalog::Catalog;
use taskd_tools::command::CommandTool;
use taskd_tools::{RegistrationError, Registry};
use taskd_upstreams::{Upstream, UpstreamError, Upstreams};

use crate::config::{tool_label, upstream_label, Config, ConfigError};

/// The command tools of `[[tools]]`, in declaration order, each built once from its
/// declaration (relative paths against the configuration file's directory).
pub fn command_tools(config: &Config) -> Result<Vec<Arc<CommandTool>>, ConfigError> {
    config
        .tools
        .iter()
        .enumerate()
        .map(|(index, declaration)| {
            CommandTool::build(declaration, &config.base_dir)
                .map(Arc::new)
                .map_err(|source| ConfigError::ToolDeclaration {
                    label: tool_label(index, Some(&declaration.name)),
                    source,
                })
        })
        .collect()
}

/// The upstream MCP servers of `[[upstreams]]`, in declaration order; two of one name
/// are refused.
pub fn upstreams(config: &Config) -> Result<Vec<Arc<Upstream>>, ConfigError> {
    let mut names = BTreeSet::new();
    let mut built = Vec::with_capacity(config.upstreams.len());
    for (index, declaration) in config.upstreams.iter().enumerate() {
        let label = upstream_label(index, Some(&declaration.name));
        let upstream = Upstream::build(declaration, &config.base_dir).map_err(|source| {
            ConfigError::UpstreamDeclaration {
                label: label.clone(),
                source,
            }
        })?;
        if !names.insert(upstream.name.clone()) {
            return Err(ConfigError::UpstreamDeclaration {
                label,
                source: UpstreamError::Duplicate,
            });
        }
        built.push(Arc::new(upstream));
    }
    Ok(built)
}

/// Registers every tool, resource and prompt the configuration asks for: its built-in
/// sets, its command tools (`commands`, built by [`command_tools`]) and what its
/// upstreams list. This is all `check-config` needs to validate a configuration.
pub fn build_catalog(
    config: &Config,
    commands: &[Arc<CommandTool>],
    hub: &Arc<Hub>,
    upstreams: &Upstreams,
) -> Result<(Registry, Catalog), RegistrationError> {
    let mut tools = Registry::default();
    let mut catalog = Catalog::default();
    taskd_builtin::register(&config.builtin.sets, &mut tools, &mut catalog, hub)?;
    for tool in commands {
        tools.register(tool.spec().clone(), tool.clone())?;
    }
    // Upstream tools as last listed: what an upstream offers is not a configuration
    // error, so a tool that cannot be served is left out, not refused.
    upstreams.register(&mut tools);
    upstreams.register_catalog(&mut catalog);
    Ok((tools, catalog))
}

/// The schedules of `config` (see `config::schedules`), each checked against the tools
/// served: the tool must run as a task, without a client's capabilities, and take the
/// arguments; a schedule whose runs wait for each other (`overlap = "queue"`) cannot use
/// a tool with a concurrency key. A tool not served is refused, unless upstream servers
/// are configured (their tools are listed once they start; until then the schedule's
/// slots are refused, and logged).
pub fn schedules(
    config: &Config,
    tools: &Registry,
) -> Result<Vec<taskd_engine::schedules::Schedule>, ConfigError> {
    use serde_json::Value;
    use taskd_engine::schedules::Overlap;
    use taskd_tools::TaskPolicy;
    let built = crate::config::schedules::built(config)?;
    for (index, schedule) in built.iter().enumerate() {
        let refuse = |detail: String| ConfigError::ScheduleEntry {
            label: crate::config::schedules::schedule_label(index, &schedule.name),
            detail,
        };
        let Some(tool) = tools.get(&schedule.tool) else {
            if config.upstreams.is_empty() {
                return Err(refuse(format!("no tool {:?} is served", schedule.tool)));
            }
            continue;
        };
        if tool.spec.task_policy == TaskPolicy::Inline {
            return Err(refuse(format!(
                "the tool {:?} only runs inline, never as a task",
                schedule.tool
            )));
        }
        if tool
            .spec
            .required_capabilities
            .as_ref()
            .is_some_and(|required| !required.is_empty())
        {
            return Err(refuse(format!(
                "the tool {:?} needs a client's capabilities",
                schedule.tool
            )));
        }
        let arguments = Value::Object(schedule.arguments.clone());
        if !tool.input.is_valid(&arguments) {
            return Err(refuse(format!(
                "arguments do not match the tool's inputSchema: {}",
                tool.input.violations(&arguments, 5).join("; ")
            )));
        }
        if schedule.overlap == Overlap::Queue && tool.spec.flow.key.is_some() {
            return Err(refuse(format!(
                "overlap = \"queue\" cannot be used with the tool {:?}, which has a \
                 concurrency key",
                schedule.tool
            )));
        }
    }
    Ok(built)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn tools_take_table_or_json_schemas_in_declared_order() {
        let config = Config::parse(
            r#"
    [[tools]]
    name = "a"
    description = "d"
    command = ["/bin/sh"]
    input_schema = { type = "object", properties = { zeta = { type = "string" }, alpha = { type = "integer" } } }

    [[tools]]
    name = "b"
    description = "d"
    command = ["/bin/sh"]
    input_schema = '{"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}}'
    "#,
        )
        .unwrap();
        let tools = command_tools(&config).unwrap();
        let schema = |index: usize| tools[index].spec().input_schema.clone();
        assert_eq!(schema(0), schema(1));
        let keys: Vec<String> = schema(0)["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["zeta", "alpha"]);
    }

    #[test]
    fn relative_commands_resolve_against_the_config_directory() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        let program = dir.path().join("bin/tool.sh");
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let text = "[[tools]]\nname = \"t\"\ndescription = \"d\"\ncommand = [\"bin/tool.sh\"]\n";
        let config = Config::parse_in(text, dir.path()).unwrap();
        assert_eq!(config.base_dir, dir.path());
        assert!(command_tools(&config).is_ok());
        let elsewhere = Config::parse_in(text, Path::new("/")).unwrap();
        let error = command_tools(&elsewhere).unwrap_err().to_string();
        assert!(
            error.contains("tools[0] (\"t\")") && error.contains("command"),
            "{error}"
        );
    }
}
