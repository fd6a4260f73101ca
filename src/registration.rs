//! What a configuration offers: its built-in sets, its command tools and its upstreams' tools, registered
//! into one [`Registry`] and [`Catalog`] — for the server, `check-config` and the
//! offline operator commands alike.

use std::sync::Arc;

use crate::catalog::Catalog;
use crate::config::Config;
use crate::notifications::Hub;
use crate::tools::{RegistrationError, Registry};
use crate::upstreams::Upstreams;

/// Registers every tool, resource and prompt the configuration asks for. This is all
/// `check-config` needs to validate a configuration.
pub fn build_catalog(
    config: &Config,
    hub: &Arc<Hub>,
    upstreams: &Upstreams,
) -> Result<(Registry, Catalog), RegistrationError> {
    let mut tools = Registry::default();
    let mut catalog = Catalog::default();
    crate::builtin::register(&config.builtin.sets, &mut tools, &mut catalog, hub)?;
    // Command tools were built when the configuration was loaded.
    for tool in &config.tools {
        tools.register(tool.spec().clone(), tool.clone())?;
    }
    // Upstream tools as last listed: what an upstream offers is not a configuration
    // error, so a tool that cannot be served is left out, not refused.
    upstreams.register(&mut tools);
    upstreams.register_catalog(&mut catalog);
    Ok((tools, catalog))
}
