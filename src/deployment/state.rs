//! `state = "ledger"` (docs/commands.md, "State in the ledger"): the ledger's PostgreSQL server as
//! the engines reach it to keep the state of the projects that name no backend of their own —
//! checked before anything runs.

use std::collections::BTreeMap;

use crate::engine::EngineKind;
use crate::engine::state::{Shared, StateServer};
use crate::error::{Error, Problem, Result};
use crate::ledger::{Opener, Place};
use crate::workspace::Workspace;
use crate::workspace::mara_toml::StatePlace;

/// Whether the workspace keeps the engines' state in the ledger, and the ledger can: refused
/// (exit 3) when the ledger is the workspace's own file, or a server the engines' driver cannot
/// reach as its URL says.
pub fn check(workspace: &Workspace, place: &Place) -> Result<bool> {
    let StatePlace::Ledger(at) = &workspace.settings.state else {
        return Ok(false);
    };
    let problem = match place {
        Place::File(file) => Problem::new(format!(
            "keeps the engines' state in the ledger's PostgreSQL server, but this workspace's ledger is its own file ({}): the state would stay on this machine, where it already is",
            workspace.display(file).display()
        ))
        .hint("point the workspace at the team's server (MARA_LEDGER_URL, or `ledger` in mara.toml: docs/commands.md, \"A team's ledger\"), or remove `state`"),
        Place::Server(url) => match crate::workspace::ledger_url::for_engines(url, false) {
            Ok(_) => return Ok(true),
            Err(reason) => Problem::new(format!("the ledger {place} {reason}")),
        },
    };
    Err(Error::config(
        problem.at(at.clone()).subject("`state = \"ledger\"`"),
    ))
}

/// The ledger's server as the engines reach it, for a command outside a run (`mara output`,
/// `config`, `unlock --engine`): the ledger is connected to only when the workspace keeps the
/// engines' state there.
pub fn for_command(
    workspace: &Workspace,
    process: &BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
) -> Result<Option<StateServer>> {
    if !matches!(workspace.settings.state, StatePlace::Ledger(_)) {
        return Ok(None);
    }
    let mut ledger = Opener::new(crate::ledger::place(workspace, process)?);
    server((workspace, &[]), &mut ledger, process, env)
}

/// The ledger's server as the engines reach it, when the workspace keeps their state there:
/// its URL for them (TLS as mara's own connection to it, `ledger` connected here), the
/// password (from the ledger's URL or `PGPASSWORD` in `process`, as mara's own connection
/// takes it), and the names the run's environment `env` sets (a backend named there wins).
/// What the backends of `engines` make on first use is made first, once.
pub fn server(
    (workspace, engines): (&Workspace, &[EngineKind]),
    ledger: &mut Opener,
    process: &BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
) -> Result<Option<StateServer>> {
    if !check(workspace, ledger.place())? {
        return Ok(None);
    }
    let Place::Server(url) = ledger.place().clone() else {
        return Ok(None);
    };
    let over_tls = match ledger.existing()? {
        Some(opened) => opened.over_tls()?,
        None => false,
    };
    let for_engines = crate::workspace::ledger_url::for_engines(&url, over_tls)
        .map_err(|reason| Error::config(Problem::new(reason)))?;
    let shared: Vec<Shared> = (engines.iter())
        .flat_map(|e| e.shared_in_server().iter().copied())
        .collect();
    if !shared.is_empty() {
        ledger.writable()?.make_for_engines(&shared).map_err(|error| {
            let names: Vec<&str> = shared.iter().map(|s| s.name).collect();
            let problem = Problem::new(format!(
                "cannot make what the engines keep their state in on the ledger's server ({}): {error}",
                names.join(", ")
            ));
            Error::config(problem.hint("the ledger's user needs CREATE on the database's schema for the first run (docs/commands.md, \"State in the ledger\")"))
        })?;
    }
    Ok(Some(StateServer {
        url: for_engines,
        password: ledger.place().password(process).into_iter().next(),
        set: env.keys().cloned().collect(),
    }))
}
