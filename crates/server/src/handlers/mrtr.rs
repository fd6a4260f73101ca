//! MRTR (SEP-2322) on the request that asked: the `input_required` answer a tool's input
//! round becomes, and the signed `requestState` that carries the tool's state to the
//! client's next call.

use serde_json::{json, Map, Value};

use super::request_state::Binding;
use super::Service;
use taskd_protocol::{missing_for_input_requests, ClientCapabilities, RpcError};

fn now_ms() -> u64 {
    taskd_base::clock::now_ms().max(0) as u64
}

impl Service {
    /// Verifies the `requestState` a client echoed, if any.
    pub(super) fn open_request_state(
        &self,
        params: &Map<String, Value>,
        binding: &Binding<'_>,
    ) -> Result<Option<Value>, RpcError> {
        match params.get("requestState") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(sealed)) => {
                self.signer.open_state(binding, sealed, now_ms()).map(Some)
            }
            Some(_) => Err(RpcError::invalid_params("requestState must be a string")),
        }
    }

    /// Builds an `InputRequiredResult`, refusing input requests the client cannot serve.
    pub(super) fn input_required(
        &self,
        binding: &Binding<'_>,
        capabilities: &ClientCapabilities,
        requests: Map<String, Value>,
        state: Option<Value>,
    ) -> Result<Value, RpcError> {
        if let Some(missing) = missing_for_input_requests(&requests, capabilities) {
            return Err(RpcError::missing_capability(missing));
        }
        let mut result = json!({ "resultType": "input_required" });
        if !requests.is_empty() {
            result["inputRequests"] = Value::Object(requests);
        }
        if let Some(state) = state {
            result["requestState"] = json!(self.signer.seal(binding, &state, now_ms()));
        }
        if result.get("inputRequests").is_none() && result.get("requestState").is_none() {
            log::error!("a tool asked for input without requests or state");
            return Err(RpcError::internal());
        }
        Ok(result)
    }
}
