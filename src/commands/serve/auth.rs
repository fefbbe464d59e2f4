//! Who a request of `mara serve` comes from (docs/commands.md, "serve"): the token in its
//! `Authorization: Bearer …`, found among the ledger's named tokens (read at each request, so a
//! token added or revoked on any machine counts at once) or equal to `MARA_SERVE_TOKEN` (an
//! operator's, named so in the audit). Viewers read; operators also cancel and unlock. On an
//! address beyond loopback, reading needs a token too. No cookie is read or set: a browser sends
//! the token only when the page's script does, so no other site can act or read through it.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::configure::SERVE_TOKEN_VARIABLE;
use crate::ledger::access::{self, Actor, Role, Via};

use super::Shared;
use super::routes::Failure;

/// Who a token names: `MARA_SERVE_TOKEN`'s holder, or a named token.
#[derive(Debug, Clone)]
pub struct Caller {
    pub name: String,
    pub role: Role,
}

impl Caller {
    /// The caller as the audit names it, and where the request came from: the page's script
    /// says so in `Mara-Via: page`; anything else is the API's.
    pub fn actor(&self, headers: &HeaderMap) -> Actor {
        let page = (headers.get("mara-via")).is_some_and(|v| v.as_bytes() == b"page");
        Actor {
            name: self.name.clone(),
            via: if page { Via::Page } else { Via::Api },
        }
    }
}

/// What a request's token turned out to be.
pub enum Presented {
    /// None given.
    Nothing,
    /// One no token of this server's has: wrong, or revoked.
    Wrong,
    Known(Caller),
}

/// The bearer token of `headers` (the scheme's name in any case, as HTTP has it).
fn bearer(headers: &HeaderMap) -> Option<String> {
    (headers.get(header::AUTHORIZATION))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim().to_string())
}

/// Who presents the token of `headers`, and whether this server takes any token at all
/// (`MARA_SERVE_TOKEN`, or a named one). A named token accepted is recorded as used.
pub async fn identify(
    app: &Shared,
    headers: &HeaderMap,
) -> Result<(Presented, bool), crate::error::Error> {
    let given = bearer(headers);
    let from_env = match (&app.token, &given) {
        (Some(expected), Some(given)) => access::matches(expected, given),
        _ => false,
    };
    let asked = given.clone().filter(|_| !from_env);
    let named = app
        .source
        .act(move |ledger| {
            let tokens = ledger.tokens()?;
            let found = (asked.as_deref()).and_then(|given| access::find(&tokens, given));
            let found = found.map(|t| Caller {
                name: t.name.clone(),
                role: t.role,
            });
            if let Some(caller) = &found {
                let now = crate::clock::rfc3339(std::time::SystemTime::now());
                // A ledger this server may only read (another user's file) still serves.
                if let Err(error) = ledger.token_used(&caller.name, &now) {
                    tracing::debug!("token `{}`'s last use not recorded: {error}", caller.name);
                }
            }
            Ok((found, !tokens.is_empty()))
        })
        .await?;
    let (found, any_named) = named.unwrap_or((None, false));
    let any = app.token.is_some() || any_named;
    let presented = match (from_env, found, given) {
        (true, _, _) => Presented::Known(Caller {
            name: SERVE_TOKEN_VARIABLE.to_string(),
            role: Role::Operator,
        }),
        (false, Some(caller), _) => Presented::Known(caller),
        (false, None, Some(_)) => Presented::Wrong,
        (false, None, None) => Presented::Nothing,
    };
    Ok((presented, any))
}

/// 401, with the scheme a client should use.
pub fn unauthorized(message: &str) -> Failure {
    Failure::new(StatusCode::UNAUTHORIZED, message)
}

/// A 401 as a response, with `WWW-Authenticate: Bearer`.
pub fn challenge(response: Response) -> Response {
    let mut response = response;
    (response.headers_mut()).insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

pub const WRONG: &str = "Wrong token: this server has no such token (mistyped, or revoked).";

/// The caller of an action (cancel, unlock), who must hold an operator's token; else the
/// refusal: 403 when the server takes no token or the token is a viewer's, 401 when none or a
/// wrong one is given.
pub async fn operator(app: &Shared, headers: &HeaderMap) -> Result<Caller, Response> {
    let (presented, any) = match identify(app, headers).await {
        Ok(found) => found,
        Err(error) => return Err(Failure::from(error).into_response()),
    };
    let refused = |status, message: String| Failure::new(status, message).into_response();
    match presented {
        _ if !any => Err(refused(
            StatusCode::FORBIDDEN,
            format!(
                "Actions are off: this server takes no token (`mara serve token add NAME --role \
                 operator`, or {SERVE_TOKEN_VARIABLE})."
            ),
        )),
        Presented::Nothing => Err(challenge(
            unauthorized("This action needs an operator's token: `Authorization: Bearer TOKEN`.")
                .into_response(),
        )),
        Presented::Wrong => Err(challenge(unauthorized(WRONG).into_response())),
        Presented::Known(caller) if caller.role < Role::Operator => Err(refused(
            StatusCode::FORBIDDEN,
            format!(
                "Token `{}` is a viewer's: cancel and unlock need an operator's token.",
                caller.name
            ),
        )),
        Presented::Known(caller) => Ok(caller),
    }
}
