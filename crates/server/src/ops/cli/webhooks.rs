//! `mcp-taskd webhooks list|retry` (issue 49): the webhooks configured with their
//! deliveries counted, recent deliveries, and dead deliveries sent again.

use clap::Subcommand;

use super::{perform, text, Location, Outcome};
use crate::ops::admin::{Request, MAX_DELIVERIES};

#[derive(Subcommand, Debug)]
pub enum WebhooksCommand {
    /// The webhooks: pending, dead and recently delivered deliveries of each; with
    /// --deliveries, the deliveries themselves, newest first.
    List {
        #[command(flatten)]
        at: Location,
        /// List deliveries instead of webhooks.
        #[arg(long)]
        deliveries: bool,
        /// Only this webhook's deliveries.
        #[arg(long, value_name = "NAME")]
        webhook: Option<String>,
        /// Only deliveries in this state (pending, delivered, dead).
        #[arg(long, value_name = "S")]
        state: Option<String>,
        /// At most this many deliveries.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Send undelivered (dead) deliveries again, with a fresh retry horizon: those of
    /// one webhook, one delivery by its webhook-id, or all of them.
    Retry {
        #[command(flatten)]
        at: Location,
        /// The webhook whose dead deliveries go again.
        #[arg(long, value_name = "NAME")]
        webhook: Option<String>,
        /// The one delivery (its webhook-id, msg_…) that goes again.
        #[arg(long, value_name = "ID")]
        id: Option<String>,
        /// Every dead delivery of every webhook.
        #[arg(long)]
        all: bool,
    },
}

/// `mcp-taskd webhooks …`
pub fn webhooks(command: WebhooksCommand) -> Outcome {
    match command {
        WebhooksCommand::List {
            at,
            deliveries: false,
            json,
            ..
        } => {
            let list = perform(&at, Request::Webhooks, "")?;
            for webhook in list.as_array().into_iter().flatten() {
                if json {
                    println!("{webhook}");
                    continue;
                }
                let target = if webhook["configured"] == true {
                    text(&webhook["url"])
                } else {
                    "(no longer configured)".to_owned()
                };
                println!(
                    "{:<28} {}  pending {}  dead {}  delivered (last hour) {}  last delivered {}",
                    text(&webhook["name"]),
                    target,
                    webhook["pending"],
                    webhook["dead"],
                    webhook["deliveredRecently"],
                    text(&webhook["lastDeliveredAt"]),
                );
            }
            Ok(())
        }
        WebhooksCommand::List {
            at,
            deliveries: true,
            webhook,
            state,
            limit,
            json,
        } => {
            let request = Request::WebhookDeliveries {
                webhook,
                state,
                before: None,
                limit: limit.clamp(1, MAX_DELIVERIES),
            };
            let list = perform(&at, request, "")?;
            for delivery in list.as_array().into_iter().flatten() {
                if json {
                    println!("{delivery}");
                    continue;
                }
                let why = match &delivery["lastError"] {
                    serde_json::Value::Null => String::new(),
                    error => format!("  {}", text(error)),
                };
                println!(
                    "{} {:<10} {:<20} {} {:<9} attempts {}{why}",
                    text(&delivery["at"]),
                    text(&delivery["webhook"]),
                    text(&delivery["event"]),
                    text(&delivery["taskId"]),
                    text(&delivery["state"]),
                    delivery["attempts"],
                );
            }
            Ok(())
        }
        WebhooksCommand::Retry {
            at,
            webhook,
            id,
            all,
        } => {
            if webhook.is_none() && id.is_none() && !all {
                return Err(
                    "say which dead deliveries go again: --webhook NAME, --id ID or --all"
                        .to_owned()
                        .into(),
                );
            }
            let retried = perform(&at, Request::WebhookRetry { webhook, id }, "")?;
            println!("{} dead deliveries are pending again", retried["retried"]);
            Ok(())
        }
    }
}
