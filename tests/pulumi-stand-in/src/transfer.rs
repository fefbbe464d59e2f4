//! `pulumi stack export` and `pulumi stack import` (`pkg/cmd/pulumi/stack/stack_export.go`,
//! `stack_import.go`, `SaveSnapshot` in `io.go`; the DIY backend's `ExportDeployment` and
//! `ImportDeployment`), on either backend, so that a stack moves from one backend to another.
//!
//! - `stack export [--file F] [--show-secrets] [--stack S]`: the stack's deployment, untyped, as
//!   `{"version": 3, "deployment": {"manifest", "secrets_providers", "resources"}}` indented by four
//!   spaces, on stdout or into `F` (nothing on stdout then). Without `--show-secrets` the
//!   checkpoint is copied as it is and no passphrase is needed; with it each secret becomes
//!   `{"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "plaintext":
//!   "<its JSON>"}`. `--version` is refused as the DIY backend refuses it.
//! - `stack import [--file F] [--force] [--stack S]`: the stack must exist (`no stack named 'S'
//!   found`, exit 6); the deployment is read from `F` or stdin, its secrets opened with its own
//!   secrets provider (the passphrase it was made with), every resource's URN must name the stack
//!   and the resources must hold together (a parent before its children, no URN twice), or the
//!   import is refused with Pulumi's list of errors unless `--force` (warnings then). Pending
//!   operations are dropped with a warning. The checkpoint is written under the stack's lock,
//!   with the deployment's secrets provider (its salt), and `Import complete.` printed.

use serde_json::{Map, Value, json};

use crate::backend::{self, SECRET_SIG};
use crate::store::os_error;
use crate::{Ctx, Failure, env};

const INCORRECT: &str = "incorrect passphrase, please set PULUMI_CONFIG_PASSPHRASE to the correct passphrase or set PULUMI_CONFIG_PASSPHRASE_FILE to a file containing the passphrase";

impl Ctx<'_> {
    pub(crate) fn stack_export(&self) -> Result<(), Failure> {
        let checkpoint = self.require_stack()?;
        if self.args.value("version").is_some_and(|v| !v.is_empty()) {
            return Err(Failure::new(
                1,
                format!(
                    "the current backend ({}) does not provide the ability to export previous deployments",
                    backend::hostname()
                ),
            ));
        }
        let mut deployment = Map::new();
        deployment.insert("version".into(), checkpoint["version"].clone());
        if checkpoint["features"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
        {
            deployment.insert("features".into(), checkpoint["features"].clone());
        }
        let mut latest = checkpoint["checkpoint"]["latest"].clone();
        if self.args.has("show-secrets") {
            let passphrase = deployment_passphrase(&latest).map_err(|m| undeserializable(&m))?;
            latest = map_secrets(&latest, &mut |secret| {
                let plaintext = open(secret, passphrase.as_deref())?;
                Ok(json!({SECRET_SIG: secret[SECRET_SIG], "plaintext": plaintext}))
            })
            .map_err(|m| undeserializable(&m))?;
        }
        deployment.insert("deployment".into(), latest);
        let text = format!("{}\n", indented(&Value::Object(deployment)));
        match self.args.value("file").filter(|f| !f.is_empty()) {
            Some(file) => std::fs::write(file, text).map_err(|e| {
                Failure::new(
                    1,
                    format!("could not open file: open {file}: {}", os_error(&e)),
                )
            }),
            None => {
                print!("{text}");
                Ok(())
            }
        }
    }

    pub(crate) fn stack_import(&self) -> Result<(), Failure> {
        self.require_stack()?;
        let text = self.import_text()?;
        let untyped: Value = match serde_json::from_str(&text) {
            Ok(value) => value,
            Err(_) if text.trim().is_empty() => return Err(Failure::new(1, "EOF")),
            Err(e) => return Err(Failure::new(1, e.to_string())),
        };
        let mut latest = self.deserialize(&untyped)?;
        self.check_snapshot(&latest)?;
        if let Some(pending) = latest
            .as_object_mut()
            .and_then(|l| l.remove("pending_operations"))
        {
            for op in pending.as_array().into_iter().flatten() {
                eprintln!(
                    "warning: removing pending operation '{}' on '{}' from snapshot",
                    op["type"].as_str().unwrap_or_default(),
                    op["resource"]["urn"].as_str().unwrap_or_default()
                );
            }
        }
        let importing = |f: Failure| {
            Failure::new(
                f.code,
                format!("could not import deployment: {}", f.message),
            )
        };
        let _lock = self
            .backend
            .lock(&self.project.name, &self.stack)
            .map_err(importing)?;
        let checkpoint = json!({
            "version": 3,
            "checkpoint": {
                "stack": format!("organization/{}/{}", self.project.name, self.stack),
                "latest": latest,
            },
        });
        self.backend
            .write(&self.project.name, &self.stack, &checkpoint)
            .map_err(importing)?;
        println!("Import complete.");
        Ok(())
    }

    /// The deployment to import: `--file`, else stdin.
    fn import_text(&self) -> Result<String, Failure> {
        match self.args.value("file").filter(|f| !f.is_empty()) {
            Some(file) => std::fs::read_to_string(file).map_err(|e| {
                Failure::new(
                    1,
                    format!("could not open file: open {file}: {}", os_error(&e)),
                )
            }),
            None => {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                    .map_err(|e| Failure::new(1, format!("read /dev/stdin: {}", os_error(&e))))?;
                Ok(text)
            }
        }
    }

    /// The untyped deployment read as `DeserializeUntypedDeployment` reads it: its version, then its
    /// secrets (shown ones encrypted with its provider). Returns the deployment to store.
    fn deserialize(&self, untyped: &Value) -> Result<Value, Failure> {
        let version = untyped["version"].as_i64().unwrap_or(0);
        if version > 4 {
            return Err(Failure::new(
                1,
                format!(
                    "the stack '{}' is newer than what this version of the Pulumi CLI understands. Please update your version of the Pulumi CLI",
                    self.stack
                ),
            ));
        }
        if version < 1 {
            return Err(Failure::new(
                1,
                format!(
                    "the stack '{}' is too old to be used by this version of the Pulumi CLI",
                    self.stack
                ),
            ));
        }
        let latest = &untyped["deployment"];
        let passphrase = deployment_passphrase(latest).map_err(|m| undeserializable(&m))?;
        map_secrets(latest, &mut |secret| {
            if let Some(plaintext) = secret["plaintext"].as_str() {
                let Some(passphrase) = &passphrase else {
                    return Err(format!("failed to encrypt: {INCORRECT}"));
                };
                return Ok(backend::secret_value(backend::encrypt(
                    plaintext, passphrase,
                )));
            }
            open(secret, passphrase.as_deref())?;
            Ok(secret.clone())
        })
        .map_err(|m| undeserializable(&m))
    }

    /// `SaveSnapshot`'s checks: each resource of this stack, and the resources in order.
    fn check_snapshot(&self, latest: &Value) -> Result<(), Failure> {
        let mut problems = Vec::new();
        let resources = latest["resources"].as_array().cloned().unwrap_or_default();
        for resource in &resources {
            let urn = resource["urn"].as_str().unwrap_or_default();
            let stack = urn
                .strip_prefix("urn:pulumi:")
                .and_then(|rest| rest.split("::").next())
                .unwrap_or_default();
            if stack != self.stack {
                problems.push(format!(
                    "resource '{urn}' is from a different stack ({stack} != {})",
                    self.stack
                ));
            }
        }
        if let Some(problem) = integrity(&resources) {
            problems.push(format!("state file contains errors: {problem}"));
        }
        if self.args.has("force") {
            for problem in &problems {
                eprintln!("warning: {problem}");
            }
            return Ok(());
        }
        if problems.is_empty() {
            return Ok(());
        }
        problems.push(
            "importing this file could be dangerous; rerun with --force to proceed anyway".into(),
        );
        let points: Vec<String> = problems.iter().map(|p| format!("* {p}")).collect();
        Err(Failure::new(
            1,
            format!(
                "{} errors occurred:\n\t{}\n",
                points.len(),
                points.join("\n\t")
            ),
        ))
    }
}

/// The first fault `VerifyIntegrity` finds: a parent missing or after its child, a URN twice.
fn integrity(resources: &[Value]) -> Option<String> {
    let mut seen: Vec<&str> = Vec::new();
    for (i, resource) in resources.iter().enumerate() {
        let urn = resource["urn"].as_str().unwrap_or_default();
        if let Some(parent) = resource["parent"].as_str().filter(|p| !seen.contains(p)) {
            let later = resources[i + 1..].iter().any(|r| r["urn"] == parent);
            return Some(match later {
                true => format!("child resource {urn}'s parent {parent} comes after it"),
                false => format!("child resource {urn} refers to missing parent {parent}"),
            });
        }
        if seen.contains(&urn) && resource["delete"] != true {
            return Some(format!(
                "duplicate resource {urn} (not marked for deletion)"
            ));
        }
        seen.push(urn);
    }
    None
}

/// The passphrase for the deployment's own secrets provider: `None` when it is not the one its
/// salt was made with (the provider is locked then: opening a secret fails).
fn deployment_passphrase(latest: &Value) -> Result<Option<String>, String> {
    let provider = &latest["secrets_providers"];
    match provider["type"].as_str().unwrap_or_default() {
        "" => Ok(None),
        "passphrase" => {
            let passphrase = backend::passphrase(&env).map_err(|f| {
                format!(
                    "constructing secrets manager of type \"passphrase\": constructing secrets manager: {}",
                    f.message
                )
            })?;
            let salt = provider["state"]["salt"].as_str().unwrap_or_default();
            Ok(backend::check_salt(salt, &passphrase)
                .ok()
                .map(|_| passphrase))
        }
        other => Err(format!("no known secrets provider for type \"{other}\"")),
    }
}

/// A secret's plaintext (its value's JSON).
fn open(secret: &Value, passphrase: Option<&str>) -> Result<String, String> {
    if let Some(plaintext) = secret["plaintext"].as_str() {
        return Ok(plaintext.to_string());
    }
    let ciphertext = secret["ciphertext"].as_str().unwrap_or_default();
    let passphrase = passphrase.ok_or_else(|| format!("failed to decrypt: {INCORRECT}"))?;
    backend::decrypt(ciphertext, passphrase).map_err(|f| f.message)
}

/// `value` with `change` applied to each secret in it.
fn map_secrets(
    value: &Value,
    change: &mut dyn FnMut(&Value) -> Result<Value, String>,
) -> Result<Value, String> {
    Ok(match value {
        Value::Object(map) if map.contains_key(SECRET_SIG) => change(value)?,
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, item) in map {
                out.insert(key.clone(), map_secrets(item, change)?);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| map_secrets(item, change))
                .collect::<Result<_, _>>()?,
        ),
        other => other.clone(),
    })
}

/// `FormatDeploymentDeserializationError`.
fn undeserializable(message: &str) -> Failure {
    Failure::new(1, format!("could not deserialize deployment: {message}"))
}

/// JSON indented by four spaces, as Go's encoder with `SetIndent("", "    ")` writes it.
pub fn indented(value: &Value) -> String {
    let mut text = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut text, formatter);
    serde::Serialize::serialize(value, &mut serializer).expect("JSON");
    String::from_utf8(text).expect("UTF-8")
}
