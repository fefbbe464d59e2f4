//! `mara serve token add|list|revoke` (docs/commands.md, "serve"): the named tokens a server of
//! this ledger takes, kept in the ledger as digests, so that a team's server and every member's
//! command line see the same set. A token's value is printed once, by `add`, alone on the last
//! line of its output, and kept nowhere.

use serde_json::json;

use crate::cli::{RoleArg, TokenCommand};
use crate::error::{Error, Problem, Result};
use crate::ledger::access::{self, Role, Token};
use crate::ledger::{self, Ledger};
use crate::settings::{OutputFormat, Settings};
use crate::ui;

pub fn run(settings: &Settings, command: TokenCommand) -> Result<()> {
    let (workspace, place) = crate::deployment::ledger_workspace(settings)?;
    let relative = |e: Error| e.relative_to(&workspace.root);
    match command {
        TokenCommand::Add { name, role } => {
            let role = match role {
                RoleArg::Viewer => Role::Viewer,
                RoleArg::Operator => Role::Operator,
            };
            let mut ledger = ledger::open(&place).map_err(relative)?;
            add(settings, ledger.as_mut(), &place, &name, role)
        }
        TokenCommand::List => {
            let tokens = match ledger::open_existing(&place).map_err(relative)? {
                Some(ledger) => ledger.tokens()?,
                None => Vec::new(),
            };
            match (settings.output, tokens.is_empty()) {
                // No token to list is a note: `-q` leaves it out.
                (OutputFormat::Human, true) => ui::note(settings, &listed(settings, &tokens)),
                _ => ui::print(&listed(settings, &tokens)),
            }
        }
        TokenCommand::Revoke { name } => {
            let revoked = match ledger::open_existing(&place).map_err(relative)? {
                Some(mut ledger) => ledger.revoke_token(&name)?,
                None => false,
            };
            if !revoked {
                return Err(Error::usage(
                    Problem::new(format!("there is no token `{name}` in the ledger {place}"))
                        .hint("`mara serve token list` lists them"),
                ));
            }
            ui::print(&match settings.output {
                OutputFormat::Json => format!("{}\n", json!({"revoked": name})),
                OutputFormat::Human => format!(
                    "Revoked token `{name}`: every server of this ledger refuses it from its next request on.\n"
                ),
            })
        }
    }
}

/// Makes token `name` with `role` in `ledger` and prints its value, alone on the last line.
fn add(
    settings: &Settings,
    ledger: &mut dyn Ledger,
    place: &ledger::Place,
    name: &str,
    role: Role,
) -> Result<()> {
    if let Some(problem) = access::name_problem(name) {
        return Err(Error::usage(
            Problem::new(problem).hint("such as `ana`, `ci-bot` or `ana@team`"),
        ));
    }
    let value = access::new_value().map_err(|e| {
        Error::Runtime(std::io::Error::new(
            e.kind(),
            format!("cannot read random bytes from /dev/urandom for the token: {e}"),
        ))
    })?;
    let (user, host) = ledger::whoami();
    let token = Token {
        name: name.to_string(),
        role,
        digest: access::digest(&value),
        created: crate::clock::rfc3339(std::time::SystemTime::now()),
        created_by: format!("{user}@{host}"),
        last_used: None,
    };
    if !ledger.add_token(&token)? {
        return Err(Error::usage(
            Problem::new(format!("the ledger {place} has a token `{name}` already")).hint(format!(
                "another name, or `mara serve token revoke {name}` first"
            )),
        ));
    }
    ui::print(&match settings.output {
        OutputFormat::Json => format!("{}\n", json!({"name": name, "role": role, "token": value})),
        OutputFormat::Human => format!(
            "Added token `{name}` ({role}) to the ledger {place}. Its value is shown this once, \
             on the next line; the ledger keeps only its digest.\n{value}\n"
        ),
    })
}

/// `token list`: names, roles, who made them and when, when last used — never a value.
fn listed(settings: &Settings, tokens: &[Token]) -> String {
    if settings.output == OutputFormat::Json {
        return format!(
            "{}\n",
            serde_json::to_string_pretty(tokens).expect("tokens serialize")
        );
    }
    if tokens.is_empty() {
        return "No token: `mara serve token add NAME --role viewer|operator` makes one.\n"
            .to_string();
    }
    let rows: Vec<[String; 5]> = (tokens.iter())
        .map(|t| {
            [
                t.name.clone(),
                t.role.to_string(),
                t.created.clone(),
                t.created_by.clone(),
                t.last_used.clone().unwrap_or_else(|| "never".into()),
            ]
        })
        .collect();
    let headers = ["NAME", "ROLE", "MADE", "BY", "LAST USED"];
    let widths = ui::column_widths(headers, &rows);
    let line = |cells: [&str; 5]| {
        let padded: Vec<String> = (cells.iter().zip(widths).take(4))
            .map(|(c, w)| ui::pad(c, w))
            .collect();
        format!("{}  {}", padded.join("  "), cells[4])
    };
    let mut out = format!("{}\n", settings.stdout_style.bold(&line(headers)));
    for r in &rows {
        out.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4]]));
        out.push('\n');
    }
    out
}
