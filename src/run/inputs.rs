//! Outputs wired as inputs (docs/formats.md, "Inputs"): the values a run gives its projects'
//! inputs, and where each comes from.
//!
//! A value is the upstream project's output as its last successful `up` left it: in this run
//! once it applied (`Values::applied`), else as the ledger recorded it, else — for a secret,
//! whose value the ledger never holds, or an output recorded before mara recorded outputs — as
//! the upstream's engine gives it (`before`, run before anything else of the run). A project's
//! inputs are resolved as its turn comes (`Values::resolve`): a value missing then fails it
//! before its engine runs, or, in a preview, makes it wait.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use serde_json::{Map, Value};

use super::plan::PlannedInput;
use crate::engine::{Operation, PlannedOutputs};
use crate::error::Problem;
use crate::graph::Plan;
use crate::ledger::RecordedOutputs;

/// Where an upstream's outputs were found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Its `up` in this run.
    ThisRun,
    /// Recorded by run `run_id`, or its engine's (`None`).
    Before(Option<String>),
}

/// An upstream project's outputs: every value known (secret ones in clear, in memory only), and
/// which are secret.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    pub values: Map<String, Value>,
    pub secret: BTreeSet<String>,
    pub found: Found,
    /// What its preview in this run plans them to be.
    pub planned: Option<PlannedOutputs>,
}

/// The outputs a run knows, by project, shared by its projects' tasks.
#[derive(Debug, Default)]
pub struct Values {
    known: Mutex<BTreeMap<String, Known>>,
}

/// A project's inputs as its engine gets them.
#[derive(Debug, Default, PartialEq)]
pub struct Resolved {
    /// `TF_VAR_<name>` or `MARA_INPUT_<NAME>` → the value as text.
    pub env: BTreeMap<String, String>,
    /// The secret values among them, for the redactor.
    pub secrets: Vec<String>,
    /// The inputs (`network:subnet_id`) whose values are those an upstream's preview plans,
    /// not the current ones.
    pub projected: Vec<String>,
    /// Each input's value as the approval compares it, by name (`approval::fingerprint`).
    pub taken: BTreeMap<String, String>,
}

/// Why a project's inputs cannot be given: the projects whose outputs it waits on, and why, in
/// a line.
#[derive(Debug, PartialEq)]
pub struct Unknown {
    pub on: Vec<String>,
    pub reason: String,
    /// Every value it lacks is one its upstream's preview plans, known only once applied.
    pub deferred: bool,
    /// It takes an output its upstream's preview plans to be gone: its own plan cannot succeed
    /// once that upstream is applied, so a preview fails it rather than wait on it.
    pub certain: bool,
}

impl Values {
    pub fn new(known: BTreeMap<String, Known>) -> Values {
        Values {
            known: Mutex::new(known),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Known>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The names of project `project`'s outputs known to be secret: as recorded in the ledger
    /// (or read from its engine) before the run, or as its `up` in this run left them.
    pub fn secret_of(&self, project: &str) -> BTreeSet<String> {
        (self.known().get(project))
            .map(|k| k.secret.clone())
            .unwrap_or_default()
    }

    /// Project `project` applied in this run, leaving `values` (`secret` among them).
    pub fn applied(&self, project: &str, values: Map<String, Value>, secret: BTreeSet<String>) {
        let known = Known {
            values,
            secret,
            found: Found::ThisRun,
            planned: None,
        };
        self.known().insert(project.to_string(), known);
    }

    /// Project `project`'s preview in this run plans its outputs as `planned`.
    pub fn planned(&self, project: &str, planned: PlannedOutputs) {
        let mut known = self.known();
        let entry = known.entry(project.to_string()).or_insert_with(|| Known {
            values: Map::new(),
            secret: BTreeSet::new(),
            found: Found::Before(None),
            planned: None,
        });
        entry.planned = Some(planned);
    }

    /// The variables `inputs` give a project, or why they cannot be given. A preview
    /// (`previewing`) takes the values its upstreams' previews in this run plan: a value known
    /// only once applied defers it.
    pub fn resolve(&self, inputs: &[PlannedInput], previewing: bool) -> Result<Resolved, Unknown> {
        let known = self.known();
        let mut gathered = Gathered::default();
        for input in inputs {
            gathered.input(input, known.get(&input.from), previewing);
        }
        gathered.verdict()
    }
}

/// A project's inputs as they are gathered: those given, and those that cannot be, each by why.
#[derive(Default)]
struct Gathered<'i> {
    resolved: Resolved,
    /// No value, or one no environment variable holds; and why.
    missing: Vec<(&'i PlannedInput, String)>,
    /// A value the upstream's preview plans, known only once applied.
    deferred: Vec<&'i PlannedInput>,
    /// An output the upstream's preview plans to be gone; whether it is there now.
    removed: Vec<(&'i PlannedInput, bool)>,
}

impl<'i> Gathered<'i> {
    /// One input, from its upstream's outputs as known (`found`) or, in a preview, as its
    /// preview plans them.
    fn input(&mut self, input: &'i PlannedInput, found: Option<&Known>, previewing: bool) {
        let planned = (found.and_then(|k| k.planned.as_ref())).filter(|_| previewing);
        let (value, secret) = match planned {
            Some(planned) => match planned.get(&input.output) {
                Some(p) if p.changes && p.value.is_none() => {
                    self.deferred.push(input);
                    return;
                }
                Some(p) if p.changes => {
                    self.resolved.projected.push(input.source());
                    // Secret when either the plan or what was known before says so (an
                    // output recorded secret that its code since made nonsensitive).
                    (p.value.as_ref(), p.secret || current(found, input).1)
                }
                Some(_) => current(found, input),
                None => {
                    self.removed
                        .push((input, current(found, input).0.is_some()));
                    return;
                }
            },
            None => current(found, input),
        };
        let Some(value) = value else {
            (self.missing).push((input, why_missing(input, found, planned.is_some())));
            return;
        };
        self.take(input, value, secret);
    }

    /// The input's `value`, as its variable's text; a secret one's texts kept for the redactor.
    fn take(&mut self, input: &'i PlannedInput, value: &Value, secret: bool) {
        let text = as_text(value);
        if secret {
            // The whole, and every part of a structured one.
            (self.resolved.secrets).extend(crate::engine::secret_texts(value));
        }
        if let Some(why) = unfit(&text) {
            self.missing.push((input, why));
            return;
        }
        let taken = super::approval::fingerprint(&text, secret);
        self.resolved.taken.insert(input.name.clone(), taken);
        self.resolved.env.insert(input.variable.clone(), text);
    }

    /// The variables, or why not: an output a plan removes first (the project's own plan cannot
    /// succeed), then a value missing, then a value known only once applied.
    fn verdict(self) -> Result<Resolved, Unknown> {
        let Gathered {
            resolved,
            missing,
            deferred,
            removed,
        } = self;
        let waits_on = |inputs: Vec<&PlannedInput>| {
            let mut on: Vec<String> = inputs.iter().map(|i| i.from.clone()).collect();
            on.dedup();
            on
        };
        if !removed.is_empty() {
            let reason = (removed.iter())
                .map(|(input, had)| {
                    let does = if *had { "removes" } else { "does not make" };
                    format!(
                        "takes {}, which {}'s plan {does}",
                        input.source(),
                        input.from
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            let on = waits_on(removed.into_iter().map(|(input, _)| input).collect());
            return Err(Unknown {
                on,
                reason,
                deferred: false,
                certain: true,
            });
        }
        if !missing.is_empty() {
            let reason = (missing.iter())
                .map(|(input, why)| format!("input {} {why}", input.source()))
                .collect::<Vec<_>>()
                .join("; ");
            let on = waits_on(missing.into_iter().map(|(input, _)| input).collect());
            return Err(Unknown {
                on,
                reason,
                deferred: false,
                certain: false,
            });
        }
        if !deferred.is_empty() {
            let sources: Vec<String> = deferred.iter().map(|i| i.source()).collect();
            let reason = format!("waits on {}, known after apply", sources.join(", "));
            let on = waits_on(deferred);
            return Err(Unknown {
                on,
                reason,
                deferred: true,
                certain: false,
            });
        }
        Ok(resolved)
    }
}

/// Why a value cannot be an environment variable's, if it cannot.
fn unfit(text: &str) -> Option<String> {
    // Linux takes no variable longer than 32 pages (MAX_ARG_STRLEN).
    const LONGEST: usize = 128 * 1024;
    if text.contains('\0') {
        Some("holds a NUL byte, which no environment variable can".to_string())
    } else if text.len() >= LONGEST {
        Some(format!(
            "is {} bytes long: an environment variable holds less than 128 KiB",
            text.len()
        ))
    } else {
        None
    }
}

/// An input's value as its upstream's outputs are now, and whether it is secret.
fn current<'k>(found: Option<&'k Known>, input: &PlannedInput) -> (Option<&'k Value>, bool) {
    let value = found.and_then(|k| k.values.get(&input.output));
    let secret = found.is_some_and(|k| k.secret.contains(&input.output));
    (value, secret)
}

/// Why an input has no value: its project has no outputs known, or not that one.
fn why_missing(input: &PlannedInput, found: Option<&Known>, planned: bool) -> String {
    if planned {
        return format!(
            "has no value: {} will have no output `{}` after its update",
            input.from, input.output
        );
    }
    match found {
        None => format!(
            "has no value: {} has not been deployed on this stack",
            input.from
        ),
        Some(known) => {
            let when = match &known.found {
                Found::ThisRun => "after its up",
                Found::Before(_) => "as deployed",
            };
            let mut names: Vec<&str> = known.values.keys().map(String::as_str).collect();
            names.sort_unstable();
            let has = match names.is_empty() {
                true => "it has none".to_string(),
                false => format!("it has {}", names.join(", ")),
            };
            format!(
                "has no value: {} has no output `{}` {when} ({has})",
                input.from, input.output
            )
        }
    }
}

/// A value as a variable holds it: a string as it is, anything else as JSON (which Terraform
/// parses for a variable of another type).
pub fn as_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A project's outputs as its engine gives them (secret ones in clear), and which are secret.
pub type Read = (Map<String, Value>, BTreeSet<String>);

/// What a run needs to know of its inputs' upstreams before it starts: those it does not apply
/// itself (`up` of a selected upstream gives its own), from the ledger's records (`recorded`),
/// and from the engine (`read`: the upstream's outputs with their secrets, and which of them are
/// secret) for a secret, or an output the ledger lacks. An input still without a value is a
/// problem (exit 3) — unless the run is a preview that also previews its upstream, or a job of
/// a fanned-out preview whose upstream another job previews (`previewed_elsewhere`: that
/// project waits), or a destroy or refresh (which may find the project without its stack as it
/// goes, and otherwise fails it before its operation). A project the run leaves untouched
/// (`absent`) needs none.
pub fn before(
    selected: &Plan<'_>,
    operation: Operation,
    absent: &BTreeMap<usize, String>,
    recorded: BTreeMap<String, RecordedOutputs>,
    read: &mut dyn FnMut(usize) -> Option<Read>,
    previewed_elsewhere: &dyn Fn(usize) -> bool,
) -> (BTreeMap<String, Known>, Vec<Problem>) {
    let graph = selected.graph;
    // A destroyed upstream's outputs are what its dependents still standing were deployed with:
    // theirs to be destroyed or refreshed with, nothing to deploy on.
    let standing = matches!(
        operation,
        Operation::Destroy | Operation::Refresh | Operation::Drift
    );
    let mut known = known_from(recorded, standing);
    let mut read_already = BTreeSet::new();
    let mut problems = Vec::new();
    for &i in selected.order().iter().filter(|i| !absent.contains_key(i)) {
        let project = graph.project(i);
        for input in &project.inputs {
            let Ok(j) = graph.find(&input.from.target) else {
                continue;
            };
            let upstream = &graph.project(j).path;
            if operation == Operation::Up && selected.contains(j) {
                continue;
            }
            let has = |known: &BTreeMap<String, Known>| {
                known
                    .get(upstream)
                    .is_some_and(|k| k.values.contains_key(&input.output))
            };
            // Read from its engine once: what the ledger cannot say (a secret, an output
            // recorded before it was taken), its secrets as the record or the engine says.
            if !has(&known)
                && read_already.insert(j)
                && let Some((values, mut secret)) = read(j)
            {
                secret.extend(
                    known
                        .get(upstream)
                        .into_iter()
                        .flat_map(|k| k.secret.clone()),
                );
                let found = Found::Before(None);
                let read = Known {
                    values,
                    secret,
                    found,
                    planned: None,
                };
                known.insert(upstream.clone(), read);
            }
            // A preview of the upstream too waits on it; a destroy or refresh may find the
            // project without its stack (a module's workspaces are listed as it runs), and
            // says so then.
            let later = match operation {
                Operation::Preview => selected.contains(j) || previewed_elsewhere(j),
                Operation::Destroy | Operation::Refresh | Operation::Drift => true,
                Operation::Up => false,
            };
            if has(&known) || later {
                continue;
            }
            problems.push(no_value(project, input, upstream, known.get(upstream)));
        }
    }
    (known, problems)
}

/// The upstreams' outputs as the ledger recorded them: a destroyed one's only for a run on
/// what still `standing` (a destroy, a refresh, a drift check).
fn known_from(
    recorded: BTreeMap<String, RecordedOutputs>,
    standing: bool,
) -> BTreeMap<String, Known> {
    recorded
        .into_iter()
        .filter(|(_, r)| standing || r.destroyed.is_none())
        .map(|(path, r)| {
            let known = Known {
                values: r.outputs.values,
                secret: r.outputs.secret,
                found: Found::Before(Some(r.run_id)),
                planned: None,
            };
            (path, known)
        })
        .collect()
}

/// An input that has no value before the run: its upstream has no outputs known, or not that
/// one.
fn no_value(
    project: &crate::provider::Project,
    input: &crate::provider::Input,
    upstream: &str,
    known: Option<&Known>,
) -> Problem {
    let problem = Problem::new(format!(
        "takes {upstream}:{}, which has no value: {upstream} {}",
        input.output,
        match known {
            Some(k) if k.secret.contains(&input.output) => format!(
                "keeps `{}` secret: the ledger holds no secret, and its engine did not give it",
                input.output
            ),
            Some(_) => format!("has no output `{}`", input.output),
            None => "has not been deployed on this stack".to_string(),
        }
    ))
    .at(input.from.at.clone())
    .subject(format!(
        "project `{}`, input `{}`",
        project.path, input.name
    ));
    match known {
        Some(k) if k.secret.contains(&input.output) => problem.hint(format!(
            "run with {upstream} selected too, or where its engine can read its state"
        )),
        Some(known) => {
            let mut names: Vec<&str> = known.values.keys().map(String::as_str).collect();
            names.sort_unstable();
            let has = match names.is_empty() {
                true => "none".to_string(),
                false => names.join(", "),
            };
            problem.hint(format!("check the output's name: {upstream} has {has}"))
        }
        None => problem.hint(format!(
            "deploy {upstream} first (`mara up --only {upstream}`), or with it (`mara up --only {} --with-dependencies`)",
            project.path
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(name: &str, from: &str, output: &str) -> PlannedInput {
        PlannedInput {
            name: name.into(),
            variable: format!("TF_VAR_{name}"),
            from: from.into(),
            output: output.into(),
        }
    }

    #[test]
    fn inputs_take_the_values_known_and_say_which_are_missing_and_why() {
        let values = Values::default();
        let inputs = [
            input("subnet_id", "network", "subnet_id"),
            input("token", "network", "token"),
            input("ports", "network", "ports"),
        ];
        let missing = values.resolve(&inputs[..1], false).unwrap_err();
        assert_eq!(missing.on, ["network"]);
        assert_eq!(
            missing.reason,
            "input network:subnet_id has no value: network has not been deployed on this stack"
        );
        let mut outputs = Map::new();
        outputs.insert("subnet_id".into(), "subnet-1".into());
        outputs.insert("token".into(), "t0k3n".into());
        outputs.insert("ports".into(), serde_json::json!([80, 443]));
        values.applied("network", outputs, BTreeSet::from(["token".to_string()]));
        let resolved = values.resolve(&inputs, false).unwrap();
        assert_eq!(resolved.env["TF_VAR_subnet_id"], "subnet-1");
        assert_eq!(resolved.env["TF_VAR_ports"], "[80,443]");
        assert_eq!(resolved.secrets, ["t0k3n"]);
        let missing = values
            .resolve(&[input("zone", "network", "zone")], false)
            .unwrap_err();
        assert_eq!(
            missing.reason,
            "input network:zone has no value: network has no output `zone` after its up (it has ports, subnet_id, token)"
        );
    }

    #[test]
    fn a_planned_value_is_secret_when_the_ledger_says_so_though_its_plan_does_not() {
        // Recorded secret (by name) before the run; its plan now says it is not.
        let recorded = Known {
            values: Map::new(),
            secret: BTreeSet::from(["token".to_string()]),
            found: Found::Before(Some("20260101-000000-aaaaaa".into())),
            planned: None,
        };
        let values = Values::new(BTreeMap::from([("network".to_string(), recorded)]));
        let planned = |secret| crate::engine::PlannedOutput {
            value: Some("t0k3n-n0w-publ1c".into()),
            changes: true,
            secret,
        };
        values.planned(
            "network",
            BTreeMap::from([("token".into(), planned(false))]),
        );
        let token = [input("token", "network", "token")];
        let resolved = values.resolve(&token, true).unwrap();
        assert_eq!(resolved.env["TF_VAR_token"], "t0k3n-n0w-publ1c");
        assert_eq!(resolved.secrets, ["t0k3n-n0w-publ1c"]);
        assert!(resolved.taken["token"].starts_with("sha256:"));
        // Nothing recorded: the plan decides.
        let values = Values::default();
        values.planned(
            "network",
            BTreeMap::from([("token".into(), planned(false))]),
        );
        let resolved = values.resolve(&token, true).unwrap();
        assert_eq!(resolved.taken["token"], "t0k3n-n0w-publ1c");
        values.planned("network", BTreeMap::from([("token".into(), planned(true))]));
        let resolved = values.resolve(&token, true).unwrap();
        assert!(resolved.taken["token"].starts_with("sha256:"));
    }
}
