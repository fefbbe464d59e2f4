//! State in the ledger's server (`state = "ledger"`: docs/commands.md, "State in the ledger"):
//! how the engines are told to keep the state of a project that names no backend of its own in
//! the ledger's PostgreSQL server. Both engines reach it through Go's `lib/pq`, which reads the
//! password from `PGPASSWORD` when its URL has none: the password is never in an argument nor in
//! a file mara writes (Terraform keeps a backend's `-backend-config` values in
//! `.terraform/terraform.tfstate`; its `PG_CONN_STR` it does not).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// The variable `lib/pq` reads a password from.
pub const PASSWORD_VARIABLE: &str = "PGPASSWORD";

/// The ledger's server, as the engines reach it.
#[derive(Clone, PartialEq, Eq)]
pub struct StateServer {
    /// `postgres://user@host:port/database?sslmode=…`: a URL `lib/pq` takes, without a password,
    /// its TLS mode one `lib/pq` knows (docs/commands.md).
    pub url: String,
    /// The ledger's password, when it has one.
    pub password: Option<String>,
    /// The variables the run's environment sets: a backend named there wins over the ledger.
    pub set: BTreeSet<String>,
}

impl std::fmt::Debug for StateServer {
    /// Without the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateServer")
            .field("url", &self.url)
            .field("password", &self.password.as_ref().map(|_| "[secret]"))
            .finish_non_exhaustive()
    }
}

impl StateServer {
    /// The variables every step of a project kept there gets besides its engine's own: the
    /// password.
    pub fn variables(&self) -> BTreeMap<String, String> {
        (self.password.iter())
            .map(|p| (PASSWORD_VARIABLE.to_string(), p.clone()))
            .collect()
    }
}

/// Gives each of `steps` of the project at `path` (in `dir`) of `engine` what keeps its state in
/// `server` (`state = "ledger"`), when it keeps it there: its engine's variables, the password,
/// the file its engine reads.
pub fn keep(
    engine: &dyn super::Engine,
    server: Option<&StateServer>,
    path: &str,
    dir: &std::path::Path,
    steps: &mut [super::Step],
) {
    let Some((server, in_server)) = server.and_then(|s| Some((s, engine.state_in(s, path, dir)?)))
    else {
        return;
    };
    let keep = |step: &mut super::Step| {
        step.env.extend(in_server.env.clone());
        step.env.extend(server.variables());
        step.generated.clone_from(&in_server.file);
    };
    for step in steps {
        keep(step);
        for repair in &mut step.repairs {
            keep(&mut repair.step);
        }
    }
}

/// What an engine's backend makes in the server on its first use, shared by all its projects (a
/// table, a sequence): mara makes it first, once, before projects run side by side — two first
/// uses at once collide, PostgreSQL's `CREATE … IF NOT EXISTS` not being safe against itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shared {
    /// Its name, as PostgreSQL's `to_regclass` finds it.
    pub name: &'static str,
    /// The statement its engine makes it with, as the engine writes it.
    pub make: &'static str,
}

/// How one project keeps its state in the server: the variables its steps get, and a file its
/// engine reads that mara writes before a step runs (Terraform's backend block).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InServer {
    pub env: BTreeMap<String, String>,
    pub file: Option<Generated>,
}

/// A file mara writes for an engine, as it must be: written (atomically) before a step that
/// needs it starts, when it is missing or differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    pub path: PathBuf,
    pub text: String,
}

impl Generated {
    /// Writes it when it is not already as it must be.
    pub fn ensure(&self) -> std::io::Result<()> {
        if crate::files::read_to_string(&self.path).is_ok_and(|t| t == self.text) {
            return Ok(());
        }
        crate::files::write_atomic(&self.path, &self.text, 0o644)
    }
}

/// What moves one project's state of a stack into the server (`mara state migrate`), as its
/// engine says: steps, run in three phases — what finds the state to move, what finds whether
/// the server holds one already (the move would replace it), and the move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// Where its state is now, said (`terraform.tfstate.d/dev/terraform.tfstate`, a backend).
    pub from: String,
    /// The steps whose last output says whether there is a state to move there
    /// (`Engine::holds_state`); none: there is (its files were found).
    pub found: Vec<Step>,
    /// Each state the move writes in the server (a Terraform workspace, a Pulumi stack), named,
    /// with the steps whose last output says whether the server holds one already.
    pub taken: Vec<(String, Vec<Step>)>,
    /// The steps that move it, in order.
    pub moves: Vec<Step>,
}

use super::Step;
