//! Who may act on a team's runs through `mara serve`, and what was done (docs/commands.md,
//! "serve"): named tokens with a role, kept in the ledger as the SHA-256 digests of their
//! values — the value itself is shown once, by `mara serve token add`, and kept nowhere —, and
//! the audit of every cancel and unlock, from the page or the command line.
//!
//! Pure: making a value, its digest and finding a token by a value given are here; the rows are
//! kept by `records.rs` in both backends.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a token lets its holder do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads the pages and their JSON.
    Viewer,
    /// Reads, cancels a run and clears a stack's lock.
    Operator,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "viewer" => Some(Role::Viewer),
            "operator" => Some(Role::Operator),
            _ => None,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A named token as the ledger keeps it: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Token {
    pub name: String,
    pub role: Role,
    /// The SHA-256 of its value, in hex: what a value given is compared with. Not shown.
    #[serde(skip)]
    pub digest: String,
    pub created: String,
    /// Who made it: `user@host` of the `mara serve token add` that did.
    pub created_by: String,
    /// When it was last accepted by a server, to the minute; `None`: never.
    pub last_used: Option<String>,
}

/// The prefix of every token's value: a reader (or a secret scanner) knows one when it sees it.
pub const PREFIX: &str = "mara_";

/// A new token's value: `mara_` and 32 random bytes from the system's generator (`getrandom`,
/// the kernel's, as `/dev/urandom` reads it), in URL-safe base64 (a header carries it as it is).
pub fn new_value() -> std::io::Result<String> {
    use base64::Engine;
    let mut bytes = [0u8; 32];
    let mut filled = 0;
    while filled < bytes.len() {
        let rest = &mut bytes[filled..];
        // SAFETY: getrandom writes at most `rest.len()` bytes into `rest`.
        let got = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        match got {
            n if n > 0 => filled += n as usize,
            _ => {
                let error = std::io::Error::last_os_error();
                if error.kind() != std::io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
        }
    }
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    Ok(format!("{PREFIX}{encoded}"))
}

/// The digest a token's value is kept as: SHA-256, in hex.
pub fn digest(value: &str) -> String {
    Sha256::digest(value.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `a` and `b` are equal, in a time that says nothing of where they differ: every byte
/// is looked at (the two are digests, of one length).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token among `tokens` whose value is `given`, if any: its digest compared with every
/// token's, each in constant time and none skipped, so that the time taken says nothing of
/// which token came close.
pub fn find<'a>(tokens: &'a [Token], given: &str) -> Option<&'a Token> {
    let given = digest(given);
    let mut found = None;
    for token in tokens {
        if same(token.digest.as_bytes(), given.as_bytes()) {
            found = Some(token);
        }
    }
    found
}

/// Whether `value` equals `expected` (`MARA_SERVE_TOKEN`), compared as `find` compares.
pub fn matches(expected: &str, value: &str) -> bool {
    same(digest(expected).as_bytes(), digest(value).as_bytes())
}

/// Why `name` cannot name a token, if it cannot: letters, digits, `.`, `_`, `-` and `@`, at
/// most 64 (it is shown in tables and in the audit).
pub fn name_problem(name: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@');
    match name {
        "" => Some("a token's name is not empty".into()),
        name if name.len() > 64 => Some(format!("`{name}` is longer than 64 characters")),
        name if !name.chars().all(allowed) => Some(format!(
            "`{name}` holds other characters than letters, digits, `.`, `_`, `-` and `@`"
        )),
        _ => None,
    }
}

/// What was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Act {
    /// A running run asked to stop (`mara cancel`).
    Cancel,
    /// A stack's lock cleared (`mara unlock --force`).
    Unlock,
}

impl Act {
    pub fn as_str(self) -> &'static str {
        match self {
            Act::Cancel => "cancel",
            Act::Unlock => "unlock",
        }
    }

    pub fn parse(text: &str) -> Option<Act> {
        match text {
            "cancel" => Some(Act::Cancel),
            "unlock" => Some(Act::Unlock),
            _ => None,
        }
    }
}

/// Where an action came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// A button of `mara serve`'s page.
    Page,
    /// A request to `mara serve`'s API from anything else (`curl`).
    Api,
    /// `mara cancel` or `mara unlock`.
    Cli,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Page => "page",
            Via::Api => "api",
            Via::Cli => "cli",
        }
    }

    pub fn parse(text: &str) -> Option<Via> {
        match text {
            "page" => Some(Via::Page),
            "api" => Some(Via::Api),
            "cli" => Some(Via::Cli),
            _ => None,
        }
    }
}

/// Who acts: a token's name (through `mara serve`), or `user@host` (the command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub name: String,
    pub via: Via,
}

impl Actor {
    /// This process's user and host, on the command line.
    pub fn command_line() -> Actor {
        let (user, host) = super::whoami();
        Actor {
            name: format!("{user}@{host}"),
            via: Via::Cli,
        }
    }
}

/// An action recorded: a run cancelled, or its stack's lock cleared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Action {
    pub at: String,
    pub act: Act,
    pub stack: String,
    /// The run it concerned: the one asked to stop, or the one whose lock was cleared.
    pub run_id: String,
    /// The token's name, or `user@host`.
    pub by: String,
    pub via: Via,
}

impl Action {
    /// What was done, by whom, how: `cancelled by ana via the web page`.
    pub fn what(&self) -> String {
        let done = match self.act {
            Act::Cancel => "cancelled",
            Act::Unlock => "unlocked",
        };
        let via = match (self.via, self.act) {
            (Via::Page, _) => "the web page",
            (Via::Api, _) => "mara serve's API",
            (Via::Cli, Act::Cancel) => "`mara cancel`",
            (Via::Cli, Act::Unlock) => "`mara unlock`",
        };
        format!("{done} by {} via {via}", self.by)
    }

    /// What was done, by whom, how, when: `cancelled by ana via the web page at
    /// 2026-11-26T04:42:41.123Z`.
    pub fn said(&self) -> String {
        format!("{} at {}", self.what(), self.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str, value: &str) -> Token {
        Token {
            name: name.into(),
            role: Role::Viewer,
            digest: digest(value),
            created: "t".into(),
            created_by: "u@h".into(),
            last_used: None,
        }
    }

    #[test]
    fn a_value_is_found_by_its_digest_and_only_by_it() {
        let value = new_value().unwrap();
        assert!(value.starts_with(PREFIX) && value.len() == PREFIX.len() + 43);
        assert_ne!(new_value().unwrap(), value, "random");
        let tokens = [token("ana", "other"), token("bo", &value)];
        assert_eq!(find(&tokens, &value).map(|t| t.name.as_str()), Some("bo"));
        assert!(find(&tokens, "wrong").is_none());
        assert!(find(&tokens, &value[..value.len() - 1]).is_none());
        assert_eq!(digest("abc").len(), 64);
        assert!(!tokens.iter().any(|t| t.digest.contains(&value)));
        assert!(matches("s3cret", "s3cret") && !matches("s3cret", "s3cre"));
    }

    #[test]
    fn names_are_words_people_read() {
        assert!(name_problem("ana").is_none());
        assert!(name_problem("ci-bot@team.example").is_none());
        for bad in ["", "a b", "ana\n", "é", &"x".repeat(65)] {
            assert!(name_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn an_action_says_who_did_what_from_where() {
        let action = Action {
            at: "T".into(),
            act: Act::Cancel,
            stack: "dev".into(),
            run_id: "r1".into(),
            by: "ana".into(),
            via: Via::Page,
        };
        assert_eq!(action.said(), "cancelled by ana via the web page at T");
        let action = Action {
            act: Act::Unlock,
            via: Via::Cli,
            by: "bo@laptop".into(),
            ..action
        };
        assert_eq!(
            action.said(),
            "unlocked by bo@laptop via `mara unlock` at T"
        );
    }
}
