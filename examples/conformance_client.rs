//! Client under test for the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`, client mode).
//!
//! The suite runs `conformance_client <server url>` with `MCP_CONFORMANCE_SCENARIO` naming the
//! scenario; the URL is always the last argument. `MCP_CONFORMANCE_PROTOCOL_VERSION` names the
//! revision the scenario runs at (the client negotiates its own: it is only logged), and
//! `MCP_CONFORMANCE_CONTEXT`, when set, is JSON that may list the tool calls to make
//! (`toolCalls: [{name, arguments}]`) or, for the `auth/*` scenarios, credentials (`client_id`,
//! `client_secret`, `issuer`, `private_key_pem`, `signing_algorithm`, the IdP's
//! `idp_token_endpoint`, `idp_client_id` and `idp_id_token`, a workload's `valid_jwt`). Each scenario is a short,
//! ordinary session through the public API; exit status 0 means the client saw no error. The
//! 2026-07-28 scenarios and what they check are in `tests/conformance/MODERN.md`, the `auth/*`
//! ones in `tests/conformance/AUTH.md`: for those the client authorizes with an
//! `OAuthProvider` whose authorizer follows the suite's authorization server headlessly.
//!
//! ```text
//! MCP_CONFORMANCE_SCENARIO=tools_call cargo run --example conformance_client -- http://127.0.0.1:3000/mcp
//! ```

use std::process::ExitCode;
use std::time::Duration;

use mcp_resume::client::oauth::{
    ClientCredentials, DpopKey, HeadlessAuthorizer, IdentityAssertion, OAuth, OAuthProvider,
    WorkloadIdentity,
};
use mcp_resume::oauth::RegisteredClient;
use mcp_resume::{Client, Request, RpcError, ToolCall};
use serde_json::{json, Map, Value};

#[tokio::main]
async fn main() -> ExitCode {
    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!(
            "usage: conformance_client <server url>  (MCP_CONFORMANCE_SCENARIO names the scenario)"
        );
        return ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    if let Ok(version) = std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION") {
        eprintln!("scenario {scenario:?} runs at protocol revision {version}");
    }
    match run(&scenario, &url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scenario {scenario:?} against {url}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(scenario: &str, url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let mut builder = Client::builder(url);
    let oauth = if scenario.starts_with("auth/") {
        let provider = oauth_provider(scenario)?;
        builder = builder.auth(provider.clone());
        Some(provider)
    } else {
        None
    };
    let outcome = session(builder, scenario).await;
    if let (Err(_), Some(provider)) = (&outcome, &oauth) {
        if let Some(failure) = provider.last_failure() {
            eprintln!("authorization: {failure}");
        }
    }
    outcome
}

/// The suite's client ID metadata document URL (its authorization server does not fetch it).
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

/// The OAuth provider of an `auth/*` scenario: pre-registered credentials when the context
/// has them (bound to its `issuer`), client credentials for the machine-to-machine scenarios,
/// an identity assertion grant when it names an IdP (enterprise-managed authorization), a
/// workload's token when it has one (workload identity federation), otherwise the
/// authorization code grant with registration by metadata document or DCR. DPoP with a key
/// of its own, where the authorization server issues DPoP-bound tokens.
fn oauth_provider(scenario: &str) -> Result<OAuthProvider, Box<dyn std::error::Error>> {
    let context = conformance_context();
    let text = |key: &str| context[key].as_str().map(str::to_owned);
    // Machine credentials belong to one authorization server. The suite's context names it
    // only in `pre-registration`; in the machine-to-machine scenarios its authorization
    // server is known only from its own MCP server's metadata, so those trust it (what an
    // application must not do with a server it does not control).
    let bind = |credentials: ClientCredentials| match text("issuer") {
        Some(issuer) => credentials.issuer(issuer),
        None => credentials.dangerous_trust_discovered_issuer(),
    };
    let mut oauth = OAuth::builder()
        .client_name("mcp-resume-conformance-client")
        .redirect_uri("http://localhost:3000/callback")
        .client_metadata_document(CLIENT_METADATA_URL)
        .authorizer(HeadlessAuthorizer::new())
        // Used only where the authorization server issues DPoP-bound tokens.
        .dpop(DpopKey::generate()?);
    if scenario.starts_with("auth/client-credentials") {
        let id = text("client_id").ok_or("the context has no client_id")?;
        let credentials = match (text("private_key_pem"), text("client_secret")) {
            (Some(pem), _) => {
                let algorithm = text("signing_algorithm").unwrap_or_else(|| "ES256".into());
                ClientCredentials::private_key_jwt(id, &pem, &algorithm)?
            }
            (None, Some(secret)) => ClientCredentials::secret(id, secret),
            (None, None) => return Err("the context has no client credentials".into()),
        };
        oauth = oauth.client_credentials(bind(credentials));
    } else if let Some(endpoint) = text("idp_token_endpoint") {
        // Enterprise-managed authorization: the user's ID token from the IdP, exchanged there
        // for an identity assertion grant, presented by the client known to the AS.
        let id_token = text("idp_id_token").ok_or("the context has no idp_id_token")?;
        let mut idp = IdentityAssertion::new(endpoint, id_token);
        if let Some(idp_client) = text("idp_client_id") {
            idp = idp.client_id(idp_client);
        }
        let id = text("client_id").ok_or("the context has no client_id")?;
        let secret = text("client_secret").ok_or("the context has no client_secret")?;
        oauth = oauth
            .client_credentials(bind(ClientCredentials::secret(id, secret)))
            .identity_assertion(idp);
    } else if let Some(jwt) = text("valid_jwt") {
        // Workload identity federation: the workload's token as a jwt-bearer assertion.
        let id = text("client_id").ok_or("the context has no client_id")?;
        oauth = oauth
            .client_credentials(bind(ClientCredentials::public(id)))
            .workload_identity(WorkloadIdentity::token(jwt));
    } else if let (Some(id), Some(issuer)) = (text("client_id"), text("issuer")) {
        let mut client = RegisteredClient::new(issuer, id);
        if let Some(secret) = text("client_secret") {
            client = client.secret(secret);
        }
        oauth = oauth.pre_registered(client);
    }
    Ok(oauth.build()?)
}

async fn session(
    builder: mcp_resume::ClientBuilder,
    scenario: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let client = builder
        .client_info("mcp-resume-conformance-client", env!("CARGO_PKG_VERSION"))
        .client_capabilities(json!({ "elicitation": {} }))
        .call_timeout(Duration::from_secs(20))
        .on_server_request(|request| async move {
            match request.method.as_str() {
                "elicitation/create" => Ok(accept_with_defaults(request.params.as_ref())),
                other => Err(RpcError::method_not_found(other)),
            }
        })
        .build()?;

    // These scenarios' servers use the standalone stream (one sends its request there, the
    // other tells a reconnection from the standalone stream by its order): the call must not
    // race the stream's opening.
    let mut events = client.events();
    let init = client.connect().await?;
    if matches!(
        scenario,
        "elicitation-sep1034-client-defaults" | "sse-retry"
    ) {
        let listening = async {
            while let Some(event) = events.recv().await {
                if matches!(event, mcp_resume::SessionEvent::Listening) {
                    return;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), listening)
            .await
            .map_err(|_| "the standalone stream never opened")?;
    }
    eprintln!(
        "connected: protocol {} server {} {}",
        init.protocol_version, init.server_name, init.server_version
    );
    let tools = client.list_tools().await?;
    eprintln!(
        "tools: {:?}",
        tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>()
    );

    let context_calls = context_tool_calls();
    match scenario {
        // Listing the tools is the whole exercise (request-metadata grades the headers and
        // `_meta` of every request; json-schema-ref-no-deref checks that listing a tool whose
        // inputSchema has a network `$ref` fetches nothing).
        "initialize" | "request-metadata" | "json-schema-ref-no-deref" => {}
        "tools_call" => call(&client, "add_numbers", json!({ "a": 5, "b": 3 })).await?,
        "sse-retry" => call(&client, "test_reconnection", json!({})).await?,
        "elicitation-sep1034-client-defaults" => {
            call(&client, "test_client_elicitation_defaults", json!({})).await?
        }
        // Round-trips the focal tool's inputSchema, as received, through the echo tool.
        "json-schema-2020-12-preservation" => {
            let focal = tools
                .iter()
                .find(|t| t.name == "json_schema_2020_12_tool")
                .ok_or("the server listed no json_schema_2020_12_tool")?;
            let schema = focal.input_schema.clone();
            call(&client, "json_schema_echo", json!({ "schema": schema })).await?
        }
        // Multi round-trip requests: two flows (with and without requestState), an unrelated
        // call after them, and a result without resultType.
        "sep-2322-client-request-state" => {
            for name in [
                "test_mrtr_echo_state",
                "test_mrtr_no_state",
                "test_mrtr_unrelated",
                "test_mrtr_no_result_type",
            ] {
                call(&client, name, json!({})).await?;
            }
        }
        // Mcp-Method on every method, Mcp-Name on tools/call, resources/read, prompts/get.
        "http-standard-headers" => {
            for tool in &tools {
                call(&client, &tool.name, sample_arguments(&tool.input_schema)).await?;
            }
            let resources = client
                .request::<Value>(Request::new("resources/list", None))
                .await?;
            for uri in list_field(&resources, "resources", "uri") {
                client
                    .request::<Value>(Request::new("resources/read", json!({ "uri": uri })))
                    .await?;
            }
            let prompts = client
                .request::<Value>(Request::new("prompts/list", None))
                .await?;
            for name in list_field(&prompts, "prompts", "name") {
                client
                    .request::<Value>(Request::new("prompts/get", json!({ "name": name })))
                    .await?;
            }
        }
        // The tools the client kept (tools with invalid x-mcp-header annotations must not be
        // listed at all), each called once.
        "http-invalid-tool-headers" => {
            for tool in &tools {
                call(&client, &tool.name, sample_arguments(&tool.input_schema)).await?;
            }
        }
        // Scenarios that name their calls in MCP_CONFORMANCE_CONTEXT (http-custom-headers:
        // x-mcp-header parameters mirrored as Mcp-Param-* headers).
        _ if !context_calls.is_empty() => {
            for (name, arguments) in context_calls {
                call(&client, &name, arguments).await?;
            }
        }
        // Unknown scenarios: exercise every listed tool without arguments, so the suite
        // grades what it can.
        _ => {
            for tool in &tools {
                call(&client, &tool.name, json!({})).await?;
            }
        }
    }

    client.close().await?;
    Ok(())
}

async fn call(client: &Client, name: &str, arguments: Value) -> Result<(), mcp_resume::Error> {
    let result = client.call_tool(ToolCall::new(name, arguments)).await?;
    eprintln!("{name}: {}", result.text());
    Ok(())
}

/// `MCP_CONFORMANCE_CONTEXT`, parsed (`null` when absent).
fn conformance_context() -> Value {
    std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str::<Value>(&c).ok())
        .unwrap_or(Value::Null)
}

/// The tool calls `MCP_CONFORMANCE_CONTEXT` lists (`toolCalls: [{name, arguments}]`), if any.
fn context_tool_calls() -> Vec<(String, Value)> {
    conformance_context()["toolCalls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let name = c["name"].as_str()?.to_owned();
            let arguments = c.get("arguments").cloned().unwrap_or_else(|| json!({}));
            Some((name, arguments))
        })
        .collect()
}

/// `result[list][*][field]` as strings (e.g. the `uri` of every listed resource).
fn list_field(result: &Value, list: &str, field: &str) -> Vec<String> {
    result[list]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item[field].as_str().map(str::to_owned))
        .collect()
}

/// Arguments satisfying the required properties of a tool's inputSchema with plain values of
/// their declared type.
fn sample_arguments(schema: &Value) -> Value {
    let mut arguments = Map::new();
    for name in schema["required"].as_array().into_iter().flatten() {
        let Some(name) = name.as_str() else { continue };
        let value = match schema["properties"][name]["type"].as_str() {
            Some("integer") => json!(1),
            Some("number") => json!(1.5),
            Some("boolean") => json!(true),
            Some("object") => json!({}),
            Some("array") => json!([]),
            Some("null") => Value::Null,
            _ => json!("us-west1"),
        };
        arguments.insert(name.to_owned(), value);
    }
    Value::Object(arguments)
}

/// Answers `elicitation/create` by accepting, with each property of the requested schema set
/// to its declared `default` (SEP-1034); properties without one are left out.
fn accept_with_defaults(params: Option<&Value>) -> Value {
    let mut content = Map::new();
    let properties = params
        .and_then(|p| p.get("requestedSchema"))
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object);
    for (name, schema) in properties.into_iter().flatten() {
        if let Some(default) = schema.get("default") {
            content.insert(name.clone(), default.clone());
        }
    }
    json!({ "action": "accept", "content": content })
}
