//! The two things `mara serve` does to the ledger (docs/commands.md, "serve"), only for a caller
//! with an operator's token (`auth::operator`): cancel a run, as `mara cancel` does, and clear a
//! stack's lock, as `mara unlock --force` does — each recorded in the ledger with the token's
//! name, in the same transaction. A server that takes no token has no actions (403), a viewer's
//! token is 403, a missing, wrong or revoked one 401. No cookie is read or set, so no other site
//! can act through a browser that has the page open.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::ledger::access::Actor;
use crate::ledger::{Holder, Ledger, process_exists, whoami};
use crate::status::RunStatus;

use super::Shared;
use super::routes::{Failure, Params, parameters};

/// What an action found: done (with what to say), or why not.
type Done = Result<(serde_json::Value, String), Failure>;

/// `work` done on the ledger, as the caller (who must hold an operator's token) says; its answer.
async fn acting(
    app: &Shared,
    headers: &HeaderMap,
    work: impl FnOnce(&mut dyn Ledger, &Actor) -> crate::error::Result<Done> + Send + 'static,
) -> Response {
    let by = match super::auth::operator(app, headers).await {
        Ok(caller) => caller.actor(headers),
        Err(refused) => return refused,
    };
    let name = by.name.clone();
    match app.source.act(move |ledger| work(ledger, &by)).await {
        Ok(Some(Ok((mut value, message)))) => {
            value["message"] = json!(message);
            value["by"] = json!(name);
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
    acting(&app, &headers, move |ledger, by| {
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
        Ok(match ledger.request_cancel(&record.stack, by)? {
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
    let workspace = app.source.workspace.clone();
    acting(&app, &headers, move |ledger, by| {
        let Some(holder) = ledger.holder(&stack)? else {
            if ledger.runs(Some(&stack), 1)?.is_empty() {
                return Ok(Err(Failure::new(
                    StatusCode::NOT_FOUND,
                    format!("No stack `{stack}` in this ledger: no run of it is recorded."),
                )));
            }
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
        let Some(holder) = ledger.unlock(&stack, by)? else {
            return Ok(Err(conflict(format!("Stack {stack} is not locked."))));
        };
        // What its engines may have kept, as `mara unlock --force` says it.
        let clear = format!("mara -s {stack} unlock --engine");
        let note = (ledger.run(&holder.run_id)?)
            .map(|run| {
                let keeps = crate::deployment::keeps_engine_lock(&workspace, &run.provider);
                crate::ui::ledger::engine_locks_note(&run, &clear, keeps)
            })
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
