//! The two things `mara serve` does to the ledger (docs/commands.md, "serve"), only for a caller
//! with `Authorization: Bearer TOKEN` equal to `MARA_SERVE_TOKEN`: cancel a run, as `mara
//! cancel` does, and clear a stack's lock, as `mara unlock --force` does. Without a token set
//! the server has no actions (403); a missing or wrong token is 401. No cookie is read or set,
//! so no other site can act through a browser that has the page open.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::ledger::{Holder, Ledger, process_exists, whoami};
use crate::status::RunStatus;

use super::Shared;
use super::routes::{Failure, Params, parameters};

/// The refusal of a request that does not carry the server's token; `None` when it does.
fn refusal(app: &Shared, headers: &HeaderMap) -> Option<Response> {
    let Some(token) = &app.token else {
        return Some(
            Failure::new(
                StatusCode::FORBIDDEN,
                "Actions are off: this server was started without MARA_SERVE_TOKEN.",
            )
            .into_response(),
        );
    };
    // An authentication scheme is named in any case in HTTP: `bearer` is `Bearer`.
    let given = (headers.get(header::AUTHORIZATION))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token);
    match given {
        Some(given) if same(given.trim(), token) => None,
        _ => {
            let mut response = Failure::new(
                StatusCode::UNAUTHORIZED,
                "This action needs the server's token: `Authorization: Bearer MARA_SERVE_TOKEN`.",
            )
            .into_response();
            (response.headers_mut()).insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            Some(response)
        }
    }
}

/// `a == b` in a time that says nothing of where they differ, nor of the token's length: their
/// digests are compared, every byte.
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// What an action found: done (with what to say), or why not.
type Done = Result<(serde_json::Value, String), Failure>;

/// `work` done on the ledger for a request that carries the token; its answer.
async fn acting(
    app: &Shared,
    headers: &HeaderMap,
    work: impl FnOnce(&mut dyn Ledger) -> crate::error::Result<Done> + Send + 'static,
) -> Response {
    if let Some(refused) = refusal(app, headers) {
        return refused;
    }
    match app.source.act(work).await {
        Ok(Some(Ok((mut value, message)))) => {
            value["message"] = json!(message);
            Json(value).into_response()
        }
        Ok(Some(Err(failure))) => failure.into_response(),
        Ok(None) => Failure::new(StatusCode::NOT_FOUND, "No run is recorded yet.").into_response(),
        Err(error) => Failure::from(error).into_response(),
    }
}

/// `POST /api/runs/ID/cancel`: asks run ID, which must be running and hold its stack, to stop.
pub async fn cancel(
    State(app): State<Shared>,
    Path(run_id): Path<String>,
    query: Params,
    headers: HeaderMap,
) -> Response {
    if let Err(failure) = parameters(query, &[]) {
        return failure.into_response();
    }
    acting(&app, &headers, move |ledger| {
        let Some(record) = ledger.run(&run_id)?.map(|r| r.as_seen()) else {
            return Ok(Err(Failure::no_run(&run_id)));
        };
        if record.status != RunStatus::Running {
            return Ok(Err(conflict(format!(
                "Run `{run_id}` is not running: it {}.",
                ended(record.status)
            ))));
        }
        let holds = (ledger.holder(&record.stack)?).is_some_and(|h| h.run_id == run_id);
        if !holds {
            return Ok(Err(conflict(format!(
                "Run `{run_id}` no longer holds stack {}'s lock.",
                record.stack
            ))));
        }
        Ok(match ledger.request_cancel(&record.stack)? {
            Some(holder) => Ok((
                json!({"cancelled": holder}),
                format!("Asked {holder} to stop; its engines are cancelling."),
            )),
            None => Err(conflict(format!("Run `{run_id}` has just ended."))),
        })
    })
    .await
}

/// `POST /api/stacks/NAME/unlock`: clears stack NAME's lock, as `mara unlock --force` does —
/// refused while the run holding it is alive on this machine (cancel it instead).
pub async fn unlock(
    State(app): State<Shared>,
    Path(stack): Path<String>,
    query: Params,
    headers: HeaderMap,
) -> Response {
    // `?run=ID`: only while that run holds it (the page says which lock it showed; a lock
    // taken since by another run is not cleared by a click on an old page).
    let expected = match parameters(query, &["run"]) {
        Ok(mut found) => found.remove("run").filter(|r| !r.is_empty()),
        Err(failure) => return failure.into_response(),
    };
    acting(&app, &headers, move |ledger| {
        let Some(holder) = ledger.holder(&stack)? else {
            return Ok(Err(conflict(format!("Stack {stack} is not locked."))));
        };
        if let Some(expected) = expected.filter(|run| *run != holder.run_id) {
            return Ok(Err(conflict(format!(
                "Stack {stack} is locked by {holder} now, not by run `{expected}`: look again."
            ))));
        }
        if alive_here(&holder) {
            return Ok(Err(conflict(format!(
                "Stack {stack} is locked by {holder}, which is alive on this host: \
                         cancel it instead."
            ))));
        }
        let Some(holder) = ledger.unlock(&stack)? else {
            return Ok(Err(conflict(format!("Stack {stack} is not locked."))));
        };
        // What its engines may have kept, as `mara unlock --force` says it.
        let clear = format!("mara -s {stack} unlock --engine");
        let note = (ledger.run(&holder.run_id)?)
            .map(|run| crate::ui::ledger::engine_locks_note(&run, &clear))
            .unwrap_or_default();
        let said = format!("Cleared the lock of {holder}; that run is recorded abandoned.\n{note}");
        Ok(Ok((
            json!({"cleared": holder}),
            said.trim_end().to_string(),
        )))
    })
    .await
}

/// A lock of this machine's own ledger held by a process that is alive here: `unlock --force`
/// refuses it too.
fn alive_here(holder: &Holder) -> bool {
    holder.lease_left.is_none() && holder.host == whoami().1 && process_exists(holder.pid)
}

fn conflict(message: String) -> Failure {
    Failure::new(StatusCode::CONFLICT, message)
}

fn ended(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Running => "is running",
        RunStatus::Succeeded => "succeeded",
        RunStatus::Failed => "failed",
        RunStatus::Cancelled => "was cancelled",
        RunStatus::Abandoned => "was abandoned",
    }
}
