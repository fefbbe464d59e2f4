//! A stand-in for the `pulumi` CLI (v3.259) for mara's tests: the real CLI cannot be installed from
//! the package registries. It follows `tests/pulumi-stand-in/pulumi-cli.md`: every flag is checked
//! against the real flag table (`pulumi-flags.json`), state lives in a DIY backend laid out as
//! Pulumi's — a directory (`PULUMI_BACKEND_URL=file://…`) or a table of a real PostgreSQL server
//! (`postgres://…`, Pulumi's DIY PostgreSQL backend with lib/pq's connection rules: see
//! `postgres/mod.rs`) — exit codes and messages are Pulumi's, and programs are a small subset of
//! Pulumi YAML (see `program.rs`) so that state really flows between projects through stack
//! references. `preview --save-plan` writes Pulumi's update plan and `up --plan` holds the update
//! to it, refusing one that leaves it as Pulumi does (`plan.rs`). `stack export` and `stack
//! import` move a stack between backends (`transfer.rs`);
//! `stack init` reuses the `encryptionsalt` its configuration file already holds, once the
//! passphrase is checked against it, as the passphrase secrets manager does. `--policy-pack` runs
//! packs of Pulumi's OPA bridge and reports their violations as Pulumi's engine does
//! (`policy.rs`); `PULUMI_ENABLE_STREAMING_JSON_PREVIEW` makes `preview --json` print the event
//! stream instead of the digest, which leaves policy events out.
//!
//! Not part of the real CLI's contract but of what it does, and mirrored: a `postgres://` URL
//! with a path keeps its keys under that path (`<database>/.pulumi/…`); lib/pq v1.12.3 takes
//! `sslmode=prefer` and `allow` (older Pulumi, with lib/pq v1.10.9, refused them: see
//! `PULUMI_STAND_IN_LIBPQ`) and defaults to `require`.
//!
//! Test knobs (environment variables):
//! - `PULUMI_STAND_IN_LOG=<file>`: append one JSON line per invocation (argv, cwd, pid, start,
//!   end, exit code, whether SIGINT arrived). Never the standard input.
//! - `PULUMI_STAND_IN_DELAY_MS=<ms>` or `<project>=<ms>,…` (`*` for the rest): how long an
//!   operation takes, holding its lock.
//! - `PULUMI_STAND_IN_FAIL=<project>` or `<operation>:<project>`, comma-separated: that operation
//!   fails as a resource error would (exit 1).
//! - `PULUMI_STAND_IN_FLAKY=<project>=<n>:<message>`, comma-separated: that project's `up`
//!   fails its first `n` times with `error: <message>` (exit 1), as a cloud API's transient
//!   error does; the times are counted in the backend (`.stand-in-flaky-<project>`).
//! - `PULUMI_STAND_IN_DRIFT=<project>:<output>=<value>`, comma-separated: the cloud holds that
//!   root stack output as `<value>`, which `preview --refresh` finds (its refresh steps: in the
//!   digest as recorded, as Pulumi's are; what the refresh read only in the stream) and compares
//!   the program with; nothing is written.
//! - `PULUMI_STAND_IN_CRASH=<project>`: the operation of that project ends as a program that
//!   crashed before Pulumi could report it does: a Python traceback on stderr, no `error:` line,
//!   exit 1.
//! - `PULUMI_STAND_IN_STEP_DELAY_MS=<command>=<ms>,…` (`config set=60000`, `stack ls=500`): how
//!   long that command waits before it does anything; a SIGINT meanwhile ends it having done
//!   nothing (exit 255), as it ends the real CLI.
//! - `PULUMI_STAND_IN_IGNORE_SIGINT=1`: ignore SIGINT (otherwise it cancels the operation as
//!   Pulumi does, releasing the lock, exit 8).
//! - `PULUMI_STAND_IN_LIBPQ=1.10.9`: connect to a `postgres://` backend as lib/pq v1.10.9 did
//!   (Pulumi v3.177 to v3.244): an `sslmode` other than `disable`, `require`, `verify-ca` and
//!   `verify-full` is refused once the host is dialled, with `pq: unsupported sslmode "prefer";
//!   only "require" (default), "verify-full", "verify-ca", and "disable" supported`.
//! - `PULUMI_STAND_IN_CHECK_ONLY=1`: only check the command line against the flag table (exit 0
//!   or 1 with the real CLI's message) and do nothing else; tests use it to re-check recorded argv.

mod backend;
mod flags;
mod plan;
mod policy;
mod postgres;
mod program;
mod store;
mod transfer;

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value, json};

use backend::{Backend, ConfigFile};
use flags::Args;
use program::Project;

/// A failure: the message printed as `error: …` and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

impl Failure {
    pub fn new(code: i32, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub fn io(path: &Path, error: std::io::Error) -> Failure {
        Failure::new(1, format!("{}: {error}", path.display()))
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn env(key: &str) -> Option<String> {
    std::env::var(key).ok()
}

fn main() {
    let start = backend::now_secs_f64();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    // SAFETY: installing a handler that only stores to an atomic is async-signal-safe.
    unsafe {
        if env("PULUMI_STAND_IN_IGNORE_SIGINT").is_some_and(|v| v == "1") {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
        } else {
            libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t);
        }
    }
    let spec = flags::Spec::load();
    let mut context = Invocation::default();
    let check_only = env("PULUMI_STAND_IN_CHECK_ONLY").is_some_and(|v| v == "1");
    let code = match flags::parse(&spec, &argv, &env) {
        Err(flags::UsageError(message)) => {
            eprintln!("error: {message}");
            1
        }
        Ok(_) if check_only => 0,
        Ok(args) => match run(&args, &mut context) {
            Ok(()) => 0,
            Err(failure) => {
                if !failure.message.is_empty() {
                    eprintln!("error: {}", failure.message);
                }
                failure.code
            }
        },
    };
    if let Some(log) = env("PULUMI_STAND_IN_LOG").filter(|_| !check_only) {
        let entry = json!({
            "argv": argv,
            "cwd": std::env::current_dir().ok(),
            "pid": std::process::id(),
            "start": start,
            "end": backend::now_secs_f64(),
            "exit": code,
            "project": context.project,
            "stack": context.stack,
            "sigint": INTERRUPTED.load(Ordering::SeqCst),
        });
        // One write per entry on an O_APPEND file: parallel stand-ins never interleave lines.
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = file.write_all(format!("{entry}\n").as_bytes());
        }
    }
    std::process::exit(code);
}

/// What the invocation log records besides argv.
#[derive(Default)]
struct Invocation {
    project: Option<String>,
    stack: Option<String>,
}

fn run(args: &Args, invocation: &mut Invocation) -> Result<(), Failure> {
    if args.has("help") {
        println!(
            "pulumi {} (stand-in): see tests/pulumi-stand-in/pulumi-cli.md",
            args.command
        );
        return Ok(());
    }
    if let Some(dir) = args.value("cwd") {
        std::env::set_current_dir(dir).map_err(|e| Failure::io(Path::new(dir), e))?;
    }
    match args.command.as_str() {
        "version" => {
            println!("{}", backend::VERSION);
            return Ok(());
        }
        "whoami" => {
            println!("{}", backend::username());
            return Ok(());
        }
        _ => {}
    }
    let cwd = std::env::current_dir().map_err(|e| Failure::io(Path::new("."), e))?;
    let project = Project::find(&cwd)?;
    invocation.project = Some(project.name.clone());
    let backend = Backend::from_env(&env, &cwd)?;
    let stack_arg = match args.command.as_str() {
        "stack select" | "stack init" | "stack rm" | "cancel" => args.positionals.first().cloned(),
        _ => None,
    };
    let stack = stack_arg
        .or_else(|| args.value("stack").map(str::to_string))
        .or_else(|| env("PULUMI_STACK"));
    let stack = stack.map(|s| s.rsplit('/').next().unwrap_or(&s).to_string());
    invocation.stack = stack.clone();
    let stack = match (args.command.as_str(), stack) {
        ("stack ls", s) => s.unwrap_or_default(),
        (_, Some(stack)) => stack,
        (_, None) => {
            return Err(Failure::new(
                1,
                "no stack selected; please use `pulumi stack select` or `pulumi stack init` to choose one",
            ));
        }
    };
    let ctx = Ctx {
        args,
        project,
        backend,
        stack,
        non_interactive: non_interactive(args),
    };
    step_delay(&args.command)?;
    match args.command.as_str() {
        "stack select" => ctx.stack_select(),
        "stack init" => ctx.stack_init(),
        "stack rm" => ctx.stack_rm(),
        "stack ls" => ctx.stack_ls(),
        "stack output" => ctx.stack_output(),
        "config" => ctx.config_list(),
        "config get" => ctx.config_get(),
        "config set" => ctx.config_set(),
        "config rm" => ctx.config_rm(),
        "cancel" => ctx.cancel(),
        "stack export" => ctx.stack_export(),
        "stack import" => ctx.stack_import(),
        "up" | "preview" | "refresh" | "destroy" => ctx.operation(),
        other => Err(Failure::new(
            1,
            format!("the stand-in does not implement `pulumi {other}`"),
        )),
    }
}

/// Waits as long as `PULUMI_STAND_IN_STEP_DELAY_MS` says for `command`; a SIGINT ends it.
fn step_delay(command: &str) -> Result<(), Failure> {
    let delay = env("PULUMI_STAND_IN_STEP_DELAY_MS")
        .unwrap_or_default()
        .split(',')
        .filter_map(|e| e.split_once('='))
        .find(|(c, _)| c.trim() == command)
        .and_then(|(_, ms)| ms.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(delay);
    while std::time::Instant::now() < deadline {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Err(Failure::new(255, "interrupted"));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(())
}

fn non_interactive(args: &Args) -> bool {
    args.has("non-interactive")
        || env("CI").is_some_and(|v| !v.is_empty())
        || env("TERM").is_some_and(|t| t == "dumb")
        || !std::io::stdin().is_terminal()
        || !std::io::stdout().is_terminal()
}

struct Ctx<'a> {
    args: &'a Args,
    project: Project,
    backend: Backend,
    stack: String,
    non_interactive: bool,
}

impl Ctx<'_> {
    fn require_stack(&self) -> Result<Value, Failure> {
        self.backend.read(&self.project.name, &self.stack)
    }

    fn config_path(&self) -> PathBuf {
        match self.args.value("config-file") {
            Some(path) => PathBuf::from(path),
            None => self.project.stack_config_path(&self.stack),
        }
    }

    /// The passphrase, checked against the stack's salt.
    fn passphrase(&self, checkpoint: &Value) -> Result<String, Failure> {
        let passphrase = backend::passphrase(&env)?;
        if let Some(salt) =
            checkpoint["checkpoint"]["latest"]["secrets_providers"]["state"]["salt"].as_str()
        {
            backend::check_salt(salt, &passphrase)?;
        }
        Ok(passphrase)
    }

    fn stack_select(&self) -> Result<(), Failure> {
        if self.backend.exists(&self.project.name, &self.stack)? {
            return Ok(());
        }
        if !self.args.has("create") {
            return Err(Failure::new(
                6,
                format!("no stack named '{}' found", self.stack),
            ));
        }
        self.create_stack()
    }

    fn stack_init(&self) -> Result<(), Failure> {
        self.create_stack()
    }

    /// `stack init` (and `stack select --create`) as `CreateStack` does it: the secrets manager
    /// first, then the stack, then its configuration file.
    fn create_stack(&self) -> Result<(), Failure> {
        match self.args.value("secrets-provider") {
            None | Some("") | Some("default") | Some("passphrase") => {}
            Some(other) => {
                return Err(Failure::new(
                    1,
                    format!(
                        "the stand-in supports the passphrase secrets provider only, not {other}"
                    ),
                ));
            }
        }
        let mut file = ConfigFile::load(&self.project.stack_config_path(&self.stack))?;
        let salt = self.salt_for_new_stack(&file).map_err(|failure| {
            Failure::new(
                failure.code,
                format!(
                    "could not create secrets manager for new stack: {}",
                    failure.message
                ),
            )
        })?;
        if self.backend.exists(&self.project.name, &self.stack)? {
            return Err(Failure::new(
                1,
                format!(
                    "stack 'organization/{}/{}' already exists",
                    self.project.name, self.stack
                ),
            ));
        }
        self.backend
            .create(&self.project.name, &self.stack, &salt)?;
        println!("Created stack '{}'", self.stack);
        // As `stack init` does on a passphrase stack: the salt goes into the project's stack file.
        if !file.top.contains_key("encryptionsalt") {
            file.top
                .insert("encryptionsalt".into(), Value::String(salt));
            file.save()?;
        }
        Ok(())
    }

    /// The passphrase provider's salt for a new stack (`NewPromptingPassphraseSecretsManager`): the
    /// one the stack's configuration file already holds, once the passphrase is checked against
    /// it (`incorrect passphrase` otherwise), else a new one.
    fn salt_for_new_stack(&self, file: &ConfigFile) -> Result<String, Failure> {
        let passphrase = backend::passphrase(&env)?;
        match file.top.get("encryptionsalt").and_then(Value::as_str) {
            Some(salt) => {
                backend::check_salt(salt, &passphrase)?;
                Ok(salt.to_string())
            }
            None => Ok(backend::new_salt(&passphrase)),
        }
    }

    fn stack_rm(&self) -> Result<(), Failure> {
        let checkpoint = self.require_stack()?;
        if !self.args.has("yes") && self.non_interactive {
            return Err(Failure::new(1, "non-interactive mode requires --yes flag"));
        }
        let resources = checkpoint["checkpoint"]["latest"]["resources"]
            .as_array()
            .map_or(0, Vec::len);
        if resources > 0 && !self.args.has("force") {
            return Err(Failure::new(
                1,
                format!(
                    "'{}' still has resources; removal rejected. Possible actions:\n- Make sure that '{}' is the stack that you want to destroy\n- Run `pulumi destroy` to delete the resources, then run `pulumi stack rm`\n- Run `pulumi stack rm --force` to override this error",
                    self.stack, self.stack
                ),
            ));
        }
        self.backend.remove(&self.project.name, &self.stack)?;
        if !self.args.has("preserve-config") {
            let _ = std::fs::remove_file(self.project.stack_config_path(&self.stack));
        }
        println!("Stack '{}' has been removed!", self.stack);
        Ok(())
    }

    fn stack_ls(&self) -> Result<(), Failure> {
        let names = self.backend.stacks(&self.project.name)?;
        let list: Vec<Value> = names
            .iter()
            .map(|name| {
                let checkpoint = self
                    .backend
                    .read(&self.project.name, name)
                    .unwrap_or_default();
                let resources = checkpoint["checkpoint"]["latest"]["resources"]
                    .as_array()
                    .map(Vec::len);
                let mut entry = json!({"name": name, "current": name == &self.stack});
                if let Some(n) = resources {
                    entry["lastUpdate"] =
                        json!(checkpoint["checkpoint"]["latest"]["manifest"]["time"]);
                    entry["resourceCount"] = json!(n);
                }
                entry
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list).expect("JSON"));
        Ok(())
    }

    fn stack_output(&self) -> Result<(), Failure> {
        let checkpoint = self.require_stack()?;
        let show = self.args.has("show-secrets");
        let passphrase = if show {
            Some(self.passphrase(&checkpoint)?)
        } else {
            None
        };
        let mut outputs = Map::new();
        for (name, value) in program::stack_outputs(&checkpoint) {
            let shown = match (value.get("ciphertext").and_then(Value::as_str), &passphrase) {
                (Some(ciphertext), Some(passphrase)) => {
                    let text = backend::decrypt(ciphertext, passphrase)?;
                    serde_json::from_str(&text).unwrap_or(Value::String(text))
                }
                (Some(_), None) => Value::String("[secret]".into()),
                (None, _) => value,
            };
            outputs.insert(name, shown);
        }
        let json = self.args.has("json");
        match self.args.positionals.first() {
            Some(name) => {
                let value = outputs.get(name).ok_or_else(|| {
                    Failure::new(
                        1,
                        format!("current stack does not have output property '{name}'"),
                    )
                })?;
                match (json, value) {
                    (true, v) => println!("{}", serde_json::to_string_pretty(v).expect("JSON")),
                    (false, Value::String(s)) => println!("{s}"),
                    (false, v) => println!("{v}"),
                }
            }
            None if json => println!(
                "{}",
                serde_json::to_string_pretty(&Value::Object(outputs)).expect("JSON")
            ),
            None => {
                println!("Current stack outputs ({}):", outputs.len());
                println!("    OUTPUT  VALUE");
                for (k, v) in &outputs {
                    println!(
                        "    {k}  {}",
                        v.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| v.to_string())
                    );
                }
            }
        }
        Ok(())
    }

    fn config_list(&self) -> Result<(), Failure> {
        let checkpoint = self.require_stack()?;
        let file = ConfigFile::load(&self.config_path())?;
        let show = self.args.has("show-secrets");
        let passphrase = if show {
            Some(self.passphrase(&checkpoint)?)
        } else {
            None
        };
        let mut out = Map::new();
        for (key, value) in file.values() {
            let entry = match (secure(&value), &passphrase) {
                (Some(c), Some(p)) => json!({"value": backend::decrypt(c, p)?, "secret": true}),
                (Some(_), None) => json!({"secret": true}),
                // An object: its JSON text and the object, secrets inside decrypted with
                // --show-secrets and `[secret]` without; secret when it holds one.
                (None, _) if value.is_object() || value.is_array() => {
                    let holds = value.to_string().contains("\"secure\"");
                    let shown = match &passphrase {
                        Some(p) => open_secrets(&value, p)?,
                        None => blind_secrets(&value),
                    };
                    json!({"value": shown.to_string(), "objectValue": shown, "secret": holds})
                }
                (None, _) => json!({"value": plain_text(&value), "secret": false}),
            };
            out.insert(key, entry);
        }
        if self.args.has("json") {
            println!(
                "{}",
                serde_json::to_string_pretty(&Value::Object(out)).expect("JSON")
            );
        } else {
            println!("KEY  VALUE");
            for (k, v) in out {
                println!(
                    "{k}  {}",
                    v.get("value").and_then(Value::as_str).unwrap_or("[secret]")
                );
            }
        }
        Ok(())
    }

    fn config_get(&self) -> Result<(), Failure> {
        let checkpoint = self.require_stack()?;
        let key = self.project.full_key(&self.args.positionals[0]);
        let file = ConfigFile::load(&self.config_path())?;
        let found = if self.args.has("path") {
            get_path(&file.values(), &key)?
        } else {
            file.values().get(&key).cloned()
        };
        let value = found.ok_or_else(|| {
            Failure::new(
                1,
                format!(
                    "configuration key '{key}' not found for stack '{}'",
                    self.stack
                ),
            )
        })?;
        let passphrase = || self.passphrase(&checkpoint);
        let (text, is_secret) = match secure(&value) {
            Some(ciphertext) => (backend::decrypt(ciphertext, &passphrase()?)?, true),
            None if value.to_string().contains("\"secure\"") => {
                // An object holding secrets: each decrypted (`--open` is the default).
                let opened = open_secrets(&value, &passphrase()?)?;
                (plain_text(&opened), true)
            }
            None => (plain_text(&value), false),
        };
        if self.args.has("json") {
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({"value": text, "secret": is_secret}))
                    .expect("JSON")
            );
        } else {
            println!("{text}");
        }
        Ok(())
    }

    fn config_set(&self) -> Result<(), Failure> {
        let checkpoint = self.require_stack()?;
        let key = self.project.full_key(&self.args.positionals[0]);
        let raw = match self.args.positionals.get(1) {
            Some(value) => value.clone(),
            None if !std::io::stdin().is_terminal() => {
                let mut text = String::new();
                std::io::stdin()
                    .read_to_string(&mut text)
                    .map_err(|e| Failure::new(1, format!("reading stdin: {e}")))?;
                if !self.args.has("raw") {
                    text = text
                        .strip_suffix('\n')
                        .map(|t| t.strip_suffix('\r').unwrap_or(t))
                        .unwrap_or(&text)
                        .to_string();
                }
                text
            }
            None => {
                return Err(Failure::new(
                    1,
                    "config value must be specified in non-interactive mode",
                ));
            }
        };
        let secret = self.args.has("secret");
        if !secret && !self.args.has("plaintext") && looks_like_secret(&key, &raw) {
            return Err(Failure::new(
                1,
                format!(
                    "config value for '{key}' looks like a secret; rerun with --secret to encrypt it, or --plaintext if you meant to store in plaintext"
                ),
            ));
        }
        let mut file = ConfigFile::load(&self.config_path())?;
        let value = if secret {
            let passphrase = self.passphrase(&checkpoint)?;
            if !file.top.contains_key("encryptionsalt")
                && let Some(salt) = checkpoint["checkpoint"]["latest"]["secrets_providers"]["state"]
                    ["salt"]
                    .as_str()
            {
                file.top
                    .insert("encryptionsalt".into(), Value::String(salt.to_string()));
            }
            json!({"secure": backend::encrypt(&raw, &passphrase)})
        } else {
            match self.args.value("type") {
                Some("int") => Value::from(
                    raw.parse::<i64>()
                        .map_err(|_| Failure::new(1, format!("invalid int value: {raw}")))?,
                ),
                Some("bool") => Value::Bool(
                    raw.parse::<bool>()
                        .map_err(|_| Failure::new(1, format!("invalid bool value: {raw}")))?,
                ),
                Some("float") => Value::from(
                    raw.parse::<f64>()
                        .map_err(|_| Failure::new(1, format!("invalid float value: {raw}")))?,
                ),
                _ => Value::String(raw),
            }
        };
        if self.args.has("path") {
            set_path(&mut file, &key, value)?;
        } else {
            file.set(&key, value);
        }
        file.save()
    }

    fn config_rm(&self) -> Result<(), Failure> {
        self.require_stack()?;
        let key = self.project.full_key(&self.args.positionals[0]);
        let mut file = ConfigFile::load(&self.config_path())?;
        let removed = match self.args.has("path") {
            true => remove_path(&mut file, &key)?,
            false => file.remove(&key),
        };
        if removed {
            file.save()?;
        }
        Ok(())
    }

    fn cancel(&self) -> Result<(), Failure> {
        self.require_stack()?;
        self.backend.cancel(&self.project.name, &self.stack)?;
        println!(
            "The currently running update for '{}' has been canceled!",
            self.stack
        );
        Ok(())
    }

    /// The transient error this `up` fails with (`PULUMI_STAND_IN_FLAKY`), counting it.
    fn flaky(&self) -> Result<Option<String>, Failure> {
        let Some(knob) = env("PULUMI_STAND_IN_FLAKY") else {
            return Ok(None);
        };
        let entry = knob.split(',').find_map(|entry| {
            let (project, rest) = entry.trim().split_once('=')?;
            let (times, message) = rest.split_once(':')?;
            (project == self.project.name).then(|| (times.parse::<u32>().ok(), message))
        });
        let Some((Some(times), message)) = entry else {
            return Ok(None);
        };
        let counter = format!(".stand-in-flaky-{}", self.project.name);
        let failed = self.backend.counter(&counter)?;
        if failed >= times {
            return Ok(None);
        }
        self.backend.set_counter(&counter, failed + 1)?;
        Ok(Some(message.to_string()))
    }

    /// The recorded resources as the cloud has them: the root stack's outputs that
    /// `PULUMI_STAND_IN_DRIFT=<project>:<output>=<value>,…` names set to those values (strings),
    /// and a refresh step for every resource read, holding what the refresh read (a resource
    /// found as recorded: the same state, no diff).
    fn refreshed(&self, recorded: &[Value]) -> (Vec<Value>, Vec<Value>) {
        let mut cloud = recorded.to_vec();
        let knob = env("PULUMI_STAND_IN_DRIFT").unwrap_or_default();
        for entry in knob.split(',').map(str::trim) {
            let Some((project, rest)) = entry.split_once(':') else {
                continue;
            };
            let Some((output, value)) = rest.split_once('=') else {
                continue;
            };
            if project != self.project.name {
                continue;
            }
            for resource in &mut cloud {
                if resource["type"] == "pulumi:pulumi:Stack" {
                    resource["outputs"][output] = Value::String(value.to_string());
                }
            }
        }
        let steps = step_ops(recorded, &cloud)
            .into_iter()
            .map(|(_, urn)| {
                let mut step = digest_step("update", &urn, recorded, &cloud);
                step["op"] = Value::String("refresh".into());
                step
            })
            .collect();
        (cloud, steps)
    }

    /// `up`, `preview`, `refresh` and `destroy`.
    fn operation(&self) -> Result<(), Failure> {
        let op = self.args.command.as_str();
        self.confirmed(op)?;
        let checkpoint = self.require_stack()?;
        let passphrase = self.passphrase(&checkpoint)?;
        let mutates = op != "preview" && !self.args.has("preview-only");
        let _lock = if mutates {
            Some(self.backend.lock(&self.project.name, &self.stack)?)
        } else {
            None
        };
        let started = backend::now_secs_f64();
        self.wait()?;
        self.told_to_fail(op)?;
        let [before, refreshes, after] = self.planned(op, &checkpoint, &passphrase)?;
        let changes = count_changes(&before, &after);
        let changed = changes.keys().any(|k| k != "same");
        // The policy packs judge what the operation would leave; a mandatory violation fails
        // it (a bail), having changed nothing and saved no plan.
        let judged = self.judged(&after)?;
        let ran = |failed: bool| Ran {
            changes: &changes,
            duration: backend::now_secs_f64() - started,
            mutates,
            judged: &judged,
            failed,
        };
        if judged.denied() {
            self.report(op, (&before, &refreshes), &after, &ran(true));
            return Err(Failure::new(1, ""));
        }
        self.plans(op, &before, &after)?;
        if mutates {
            self.write(&checkpoint, &after)?;
        }
        self.report(op, (&before, &refreshes), &after, &ran(false));
        if op == "destroy" && self.args.has("remove") {
            self.backend.remove(&self.project.name, &self.stack)?;
            let _ = std::fs::remove_file(self.project.stack_config_path(&self.stack));
            println!(
                "The resources in the stack have been deleted, and the history and configuration associated with the stack have been removed."
            );
        }
        if self.args.has("expect-no-changes") && changed {
            let what = match op {
                "up" => "update",
                other => other,
            };
            return Err(Failure::new(
                7,
                format!("no changes were expected for {what} but changes were proposed"),
            ));
        }
        Ok(())
    }

    /// An operation that changes the stack needs its confirmation (`--yes`) when nobody is
    /// asked.
    fn confirmed(&self, op: &str) -> Result<(), Failure> {
        let confirmed = self.args.has("yes")
            || self.args.has("skip-preview")
            || env("PULUMI_SKIP_CONFIRMATIONS").is_some_and(|v| v == "true" || v == "1");
        if op != "preview" && !confirmed && !self.args.has("preview-only") {
            let message = "--yes or --skip-preview or --preview-only must be passed in to proceed when running in non-interactive mode";
            // refresh reports it as a plain error (exit 1); up and destroy as a missing confirmation (2).
            return Err(Failure::new(if op == "refresh" { 1 } else { 2 }, message));
        }
        Ok(())
    }

    /// What the knobs tell the operation to do instead of its work: crash, fail once, fail.
    fn told_to_fail(&self, op: &str) -> Result<(), Failure> {
        if env("PULUMI_STAND_IN_CRASH").is_some_and(|p| p == self.project.name) {
            eprintln!(
                "Traceback (most recent call last):\n  File \"/usr/lib/python3/dist-packages/pulumi/runtime/stack.py\", line 138, in run_in_stack\n    await run_pulumi_func(run)\n  File \"__main__.py\", line 12, in <module>\n    cluster = config.require_object(\"cluster\")\nKeyError: 'aws:profile'\n"
            );
            std::process::exit(1);
        }
        if op == "up"
            && let Some(message) = self.flaky()?
        {
            return Err(self.bail(op, &message));
        }
        if fails(op, &self.project.name) {
            let message = format!(
                "the stand-in was told to fail {op} of {} (PULUMI_STAND_IN_FAIL)",
                self.project.name
            );
            return Err(self.bail(op, &message));
        }
        Ok(())
    }

    /// The resources before the operation (as recorded, or as a `preview --refresh` finds them
    /// in the cloud: `PULUMI_STAND_IN_DRIFT`, nothing written), the refresh's steps (one for each
    /// resource it read), and the resources the operation leaves.
    fn planned(
        &self,
        op: &str,
        checkpoint: &Value,
        passphrase: &str,
    ) -> Result<[Vec<Value>; 3], Failure> {
        let recorded = checkpoint["checkpoint"]["latest"]["resources"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let (before, refreshes) = match op == "preview" && self.args.has("refresh") {
            true => self.refreshed(&recorded),
            false => (recorded, Vec::new()),
        };
        let after = match op {
            "destroy" => Vec::new(),
            "refresh" => before.clone(),
            _ => {
                let config = ConfigFile::load(&self.config_path())?.values();
                let evaluated = program::evaluate(
                    &self.project,
                    &self.stack,
                    &config,
                    &self.backend,
                    Some(passphrase.to_string()),
                )
                .map_err(|failure| match self.args.has("json") {
                    true => self.bail(op, &failure.message),
                    false => failure,
                })?;
                self.resources(&evaluated, passphrase)
            }
        };
        Ok([before, refreshes, after])
    }

    /// An update held to a saved plan (`--plan`): one that leaves it fails, having changed
    /// nothing. A preview that saves its plan (`--save-plan`) writes it.
    fn plans(&self, op: &str, before: &[Value], after: &[Value]) -> Result<(), Failure> {
        if let Some(file) = self.args.value("plan").filter(|_| op == "up") {
            let planned = plan::read(Path::new(file))?;
            if let Err(message) = plan::check(&planned, before, after) {
                return Err(self.bail(op, &message));
            }
        }
        if let Some(file) = self.args.value("save-plan").filter(|_| op == "preview") {
            let config = ConfigFile::load(&self.config_path())?.values();
            plan::save(Path::new(file), (before, after), &config)?;
        }
        Ok(())
    }

    /// The stack's checkpoint with the resources the operation left.
    fn write(&self, checkpoint: &Value, after: &[Value]) -> Result<(), Failure> {
        let mut next = checkpoint.clone();
        next["checkpoint"]["latest"]["manifest"] = backend::manifest();
        next["checkpoint"]["latest"]["resources"] = Value::Array(after.to_vec());
        if after.is_empty() {
            next["checkpoint"]["latest"]
                .as_object_mut()
                .expect("latest")
                .remove("resources");
        }
        self.backend.write(&self.project.name, &self.stack, &next)
    }

    /// An update or preview that failed in the engine (the program, a resource): Pulumi shows the
    /// error among its diagnostics — in `--json` mode a `diagnosticEvent` of severity `error` and
    /// a failed `summaryEvent`, or the preview digest's `diagnostics` — and exits 1 without an
    /// `error:` line of its own (a "bail").
    fn bail(&self, op: &str, message: &str) -> Failure {
        if !self.args.has("json") {
            println!("    error: {message}");
        } else if op == "preview" && !streams() {
            // The digest writes a diagnostic's prefix into its message (`ShowJSONEvents`).
            let digest = json!({
                "diagnostics": [{"message": format!("error: {message}\n"), "severity": "error"}],
                "changeSummary": {},
            });
            println!("{}", transfer::indented(&digest));
        } else {
            let now = (backend::now_nanos() / 1_000_000_000) as u64;
            println!(
                "{}",
                json!({"sequence": 0, "timestamp": now, "diagnosticEvent": {"message": format!("{message}\n"), "prefix": "error: ", "color": "never", "severity": "error"}})
            );
            println!(
                "{}",
                json!({"sequence": 1, "timestamp": now, "summaryEvent": {"maybeCorrupt": false, "durationSeconds": 0, "resourceChanges": {}, "PolicyPacks": {}, "isPreview": op == "preview", "result": "failed"}})
            );
            // Every engine operation ends its stream with a cancel event (`update.go`).
            println!(
                "{}",
                json!({"sequence": 2, "timestamp": now, "cancelEvent": {}})
            );
        }
        Failure::new(1, "")
    }

    /// Sleeps as long as the delay knob says, giving up on SIGINT as Pulumi cancels an update.
    fn wait(&self) -> Result<(), Failure> {
        let delay = delay_ms(&self.project.name);
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(delay);
        loop {
            if INTERRUPTED.load(Ordering::SeqCst) {
                println!(
                    "^C received; cancelling. If you would like to terminate immediately, press ^C again."
                );
                let what = if self.args.command == "destroy" {
                    "destroy"
                } else {
                    "update"
                };
                return Err(Failure::new(8, format!("{what} cancelled")));
            }
            if std::time::Instant::now() >= deadline {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// The resources the program declares: the stack itself and its stack references.
    fn resources(&self, evaluated: &program::Evaluated, passphrase: &str) -> Vec<Value> {
        let stack_urn = format!(
            "urn:pulumi:{}::{}::pulumi:pulumi:Stack::{}-{}",
            self.stack, self.project.name, self.project.name, self.stack
        );
        let mut outputs = Map::new();
        for (name, value) in &evaluated.outputs {
            let (plain, is_secret) = program::reveal(value);
            let stored = if is_secret {
                backend::secret_value(backend::encrypt(&plain.to_string(), passphrase))
            } else {
                plain
            };
            outputs.insert(name.clone(), stored);
        }
        let mut resources = vec![
            json!({"urn": stack_urn, "custom": false, "type": "pulumi:pulumi:Stack", "outputs": outputs}),
        ];
        for (name, target) in &evaluated.references {
            resources.push(json!({
                "urn": format!("urn:pulumi:{}::{}::pulumi:pulumi:StackReference::{name}", self.stack, self.project.name),
                "custom": true,
                "id": target,
                "type": "pulumi:pulumi:StackReference",
                "inputs": {"name": target},
                "outputs": {"name": target},
                "parent": stack_urn,
            }));
        }
        resources
    }

    fn report(
        &self,
        op: &str,
        (before, refreshes): (&[Value], &[Value]),
        after: &[Value],
        run: &Ran,
    ) {
        let json = self.args.has("json");
        if json && op == "preview" && !streams() {
            // The digest: Pulumi's leaves the policy events out (`ShowPreviewDigest`).
            let digest = preview_digest(before, refreshes, after, run);
            println!("{}", transfer::indented(&digest));
            return;
        }
        if json {
            let preview = op == "preview";
            let now = (backend::now_nanos() / 1_000_000_000) as u64;
            let mut sequence = 0;
            let mut event = |kind: &str, body: Value| {
                println!(
                    "{}",
                    json!({"sequence": sequence, "timestamp": now, kind: body})
                );
                sequence += 1;
            };
            event("preludeEvent", json!({"config": {}}));
            for (kind, body) in step_events(before, refreshes, after, preview) {
                event(kind, body);
            }
            // `--color never` takes the colour directives out of a policy event's message.
            let plain = self.args.value("color") == Some("never");
            for violation in &run.judged.violations {
                event("policyEvent", policy::event(violation, plain));
            }
            // An update a policy refused applied nothing (the stand-in applies a stack at once).
            let empty = Map::new();
            let changes = match run.failed && run.mutates {
                true => &empty,
                false => run.changes,
            };
            event(
                "summaryEvent",
                json!({"maybeCorrupt": false, "durationSeconds": run.duration as u64, "resourceChanges": changes, "PolicyPacks": policy::summary(&run.judged.packs), "isPreview": !run.mutates, "result": if run.failed { "failed" } else { "succeeded" }}),
            );
            // Every engine operation ends its stream with a cancel event, after its summary
            // (`update.go`, `refresh.go`, `destroy.go`: the engine's events are closed so).
            event("cancelEvent", json!({}));
            return;
        }
        self.text_report(op, after, run);
    }

    /// What Pulumi prints for people: the resources, the outputs of an update, the policy
    /// violations, the counts.
    fn text_report(&self, op: &str, after: &[Value], run: &Ran) {
        let changes = run.changes;
        let duration = run.duration;
        let verb = match op {
            "up" => "Updating",
            "preview" => "Previewing update",
            "refresh" => "Refreshing",
            _ => "Destroying",
        };
        println!("{verb} ({})\n", self.stack);
        println!("     Type                 Name");
        for resource in after {
            println!(
                "     {}  {}",
                resource["type"].as_str().unwrap_or_default(),
                resource["urn"]
                    .as_str()
                    .unwrap_or_default()
                    .rsplit("::")
                    .next()
                    .unwrap_or_default()
            );
        }
        if op == "up"
            && let Some(outputs) = after.first().and_then(|s| s["outputs"].as_object())
            && !outputs.is_empty()
        {
            println!("\nOutputs:");
            for (name, value) in outputs {
                let shown = if value.get(backend::SECRET_SIG).is_some() {
                    "[secret]".to_string()
                } else {
                    value.to_string()
                };
                println!("    {name}: {shown}");
            }
        }
        if !run.judged.violations.is_empty() {
            println!("\nPolicy Violations:");
            for v in &run.judged.violations {
                let level = if v.mandatory { "mandatory" } else { "advisory" };
                println!(
                    "    [{level}]  {} v{}  {} ({})",
                    v.pack, v.version, v.policy, v.urn
                );
                println!("    {}", v.message);
            }
        }
        println!("\nResources:");
        for (kind, count) in changes {
            println!("    {count} {kind}");
        }
        println!("\nDuration: {}s", duration.round());
    }
}

/// What an operation did, for its report.
struct Ran<'a> {
    changes: &'a Map<String, Value>,
    duration: f64,
    mutates: bool,
    judged: &'a Judged,
    /// Failed by a mandatory policy.
    failed: bool,
}

/// The policy packs of the operation (`--policy-pack`) and what they found.
#[derive(Default)]
struct Judged {
    packs: Vec<policy::Pack>,
    violations: Vec<policy::Violation>,
}

impl Judged {
    fn denied(&self) -> bool {
        self.violations.iter().any(|v| v.mandatory)
    }
}

impl Ctx<'_> {
    /// The packs' verdicts on every resource the program registers (Pulumi analyzes each as
    /// it is registered, whatever its step), then on the stack as it would be.
    fn judged(&self, after: &[Value]) -> Result<Judged, Failure> {
        let values = self
            .args
            .flags
            .get("policy-pack")
            .cloned()
            .unwrap_or_default();
        let mut packs = policy::load_all(&values)?;
        let mut violations = Vec::new();
        let stack_urn = after
            .first()
            .map(|s| s["urn"].as_str().unwrap_or_default().to_string());
        for pack in &mut packs {
            for resource in after {
                violations.extend(pack.analyze(resource)?);
            }
            violations.extend(pack.analyze_stack(after, stack_urn.as_deref().unwrap_or_default())?);
        }
        Ok(Judged { packs, violations })
    }
}

/// A preview's digest (`preview --json`): the refresh's steps first, then each change. The
/// digest is made of the steps' `resourcePreEvent`s (`ShowPreviewDigest` passes over their
/// `resOutputsEvent`s), and a refresh step's holds the resource as recorded on both sides
/// (Pulumi's `NewRefreshStep` sets `new` to `old` until the step has run) and no diff: what the
/// refresh read is only in the stream (`step_events`).
fn preview_digest(before: &[Value], refreshes: &[Value], after: &[Value], run: &Ran) -> Value {
    let mut steps: Vec<Value> = refreshes.iter().map(as_recorded).collect();
    steps.extend(
        step_ops(before, after)
            .into_iter()
            .filter(|(op, _)| *op != "same")
            .map(|(op, urn)| as_registered(&digest_step(op, &urn, before, after))),
    );
    json!({"steps": steps, "duration": (run.duration * 1e9) as u64, "changeSummary": run.changes})
}

fn is_root_stack(step: &Value) -> bool {
    step["urn"]
        .as_str()
        .is_some_and(|urn| urn.contains("::pulumi:pulumi:Stack::"))
}

/// A step as its `resourcePreEvent` holds it: the root stack is registered before its program
/// has run, its outputs as they were (a new stack's none) — Pulumi sets the new ones when the
/// program ends, in the stack's `resOutputsEvent`, which the digest passes over. (Pulumi's
/// digest serializes the state when it gets to the event, so it may hold the new outputs or not
/// — Pulumi's issue 9571; the stand-in's holds the old ones, so that nothing reads the digest's
/// for planned outputs.)
fn as_registered(step: &Value) -> Value {
    let mut registered = step.clone();
    if is_root_stack(step) && step.get("newState").is_some() {
        let old = step["oldState"]["outputs"].clone();
        let old = if old.is_object() { old } else { json!({}) };
        registered["newState"]["outputs"] = old;
    }
    registered
}

/// A refresh step as it is before it runs: the resource as recorded on both sides, no diff.
fn as_recorded(step: &Value) -> Value {
    let mut recorded = step.clone();
    recorded["newState"] = step["oldState"].clone();
    if let Some(step) = recorded.as_object_mut() {
        step.remove("diffReasons");
        step.remove("detailedDiff");
    }
    recorded
}

/// Whether `preview --json` streams its events (`PULUMI_ENABLE_STREAMING_JSON_PREVIEW`, read
/// as Pulumi's `env.Bool` reads it) instead of printing its digest.
fn streams() -> bool {
    env("PULUMI_ENABLE_STREAMING_JSON_PREVIEW")
        .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// The resource events of an operation's stream. A streamed preview's carry each step's
/// metadata as the digest's steps do (`old`/`new` states, `diffs`, `detailedDiff` with
/// `diffKind`), `planning` set, every step (`same` too: the stream leaves none out); a refresh
/// step's `resourcePreEvent` holds the state as recorded, and its `resOutputsEvent` the state as
/// the refresh read it, with its diff. An update's are the resources it leaves, as `same` (the
/// stand-in's updates apply a stack at once).
fn step_events(
    before: &[Value],
    refreshes: &[Value],
    after: &[Value],
    preview: bool,
) -> Vec<(&'static str, Value)> {
    if !preview {
        let same =
            |r: &Value| json!({"metadata": {"op": "same", "urn": r["urn"], "type": r["type"]}});
        return after
            .iter()
            .map(|r| ("resourcePreEvent", same(r)))
            .collect();
    }
    let metadata = |step: &Value| {
        let state = |key: &str| step.get(key).cloned().unwrap_or(Value::Null);
        let kind = match state("newState")["type"].clone() {
            Value::Null => state("oldState")["type"].clone(),
            kind => kind,
        };
        let detailed: Map<String, Value> = (step["detailedDiff"].as_object().into_iter().flatten())
            .map(|(path, d)| {
                let diff = json!({"diffKind": d["kind"], "inputDiff": d["inputDiff"]});
                (path.clone(), diff)
            })
            .collect();
        json!({
            "op": step["op"], "urn": step["urn"], "type": kind,
            "old": state("oldState"), "new": state("newState"),
            "diffs": step.get("diffReasons").cloned().unwrap_or_else(|| json!([])),
            "detailedDiff": if detailed.is_empty() { Value::Null } else { Value::Object(detailed) },
            "provider": "",
        })
    };
    let mut events = Vec::new();
    for step in refreshes {
        let read = metadata(step);
        let recorded = metadata(&as_recorded(step));
        events.push((
            "resourcePreEvent",
            json!({"metadata": recorded, "planning": true}),
        ));
        events.push((
            "resOutputsEvent",
            json!({"metadata": read, "planning": true}),
        ));
    }
    // The root stack's outputs are registered when the program ends: its own outputs event,
    // the last, says them.
    let mut registered = None;
    for (op, urn) in step_ops(before, after) {
        let step = digest_step(op, &urn, before, after);
        events.push((
            "resourcePreEvent",
            json!({"metadata": metadata(&as_registered(&step)), "planning": true}),
        ));
        if is_root_stack(&step) && step.get("newState").is_some() {
            registered = Some(metadata(&step));
        }
    }
    if let Some(root) = registered {
        events.push((
            "resOutputsEvent",
            json!({"metadata": root, "planning": true}),
        ));
    }
    events
}

/// The step of each resource between two resource lists: (op, urn).
fn step_ops(before: &[Value], after: &[Value]) -> Vec<(&'static str, Value)> {
    let mut steps = Vec::new();
    for resource in after {
        let previous = before.iter().find(|b| b["urn"] == resource["urn"]);
        let op = match previous {
            None => "create",
            Some(p) if p["outputs"] == resource["outputs"] && p["inputs"] == resource["inputs"] => {
                "same"
            }
            Some(_) => "update",
        };
        steps.push((op, resource["urn"].clone()));
    }
    for resource in before {
        if !after.iter().any(|a| a["urn"] == resource["urn"]) {
            steps.push(("delete", resource["urn"].clone()));
        }
    }
    steps
}

/// One step of the preview digest as Pulumi writes it: its `oldState` and `newState` (the
/// resource's type, inputs and outputs: the root stack's outputs are what its dependents read),
/// and for an update which properties differ, `diffReasons` and `detailedDiff`
/// (`{"outputs.name": {"kind": "update", "inputDiff": false}}`). Secret values stay as stored
/// (ciphertext).
fn digest_step(op: &str, urn: &Value, before: &[Value], after: &[Value]) -> Value {
    let state = |resource: &Value| {
        json!({
            "urn": resource["urn"],
            "type": resource["type"],
            "inputs": resource.get("inputs").cloned().unwrap_or_else(|| json!({})),
            "outputs": resource.get("outputs").cloned().unwrap_or_else(|| json!({})),
        })
    };
    let old = before.iter().find(|r| &r["urn"] == urn);
    let new = after.iter().find(|r| &r["urn"] == urn);
    let mut step = Map::new();
    step.insert("op".into(), Value::from(op));
    step.insert("urn".into(), urn.clone());
    if let Some(old) = old {
        step.insert("oldState".into(), state(old));
    }
    if let Some(new) = new {
        step.insert("newState".into(), state(new));
    }
    if let (Some(old), Some(new)) = (old, new) {
        let mut reasons = Vec::new();
        let mut detailed = Map::new();
        for (section, input) in [("inputs", true), ("outputs", false)] {
            let empty = Map::new();
            let was = old[section].as_object().unwrap_or(&empty);
            let now = new[section].as_object().unwrap_or(&empty);
            let keys: std::collections::BTreeSet<&String> = was.keys().chain(now.keys()).collect();
            for key in keys {
                let kind = match (was.get(key), now.get(key)) {
                    (None, Some(_)) => "add",
                    (Some(_), None) => "delete",
                    (Some(a), Some(b)) if a != b => "update",
                    _ => continue,
                };
                let path = if input {
                    key.clone()
                } else {
                    format!("outputs.{key}")
                };
                reasons.push(Value::from(key.as_str()));
                detailed.insert(path, json!({"kind": kind, "inputDiff": input}));
            }
        }
        if !detailed.is_empty() {
            step.insert("diffReasons".into(), Value::Array(reasons));
            step.insert("detailedDiff".into(), Value::Object(detailed));
        }
    }
    Value::Object(step)
}

/// Pulumi's change counts between two resource lists, keyed by op name.
fn count_changes(before: &[Value], after: &[Value]) -> Map<String, Value> {
    let mut counts: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for (op, _) in step_ops(before, after) {
        *counts.entry(op).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(k, v)| (k.to_string(), Value::from(v)))
        .collect()
}

fn delay_ms(project: &str) -> u64 {
    let Some(knob) = env("PULUMI_STAND_IN_DELAY_MS") else {
        return 0;
    };
    if !knob.contains('=') {
        return knob.trim().parse().unwrap_or(0);
    }
    let entries: Vec<(&str, u64)> = knob
        .split(',')
        .filter_map(|e| e.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim().parse().unwrap_or(0)))
        .collect();
    entries
        .iter()
        .find(|(k, _)| *k == project)
        .or_else(|| entries.iter().find(|(k, _)| *k == "*"))
        .map_or(0, |(_, v)| *v)
}

fn fails(op: &str, project: &str) -> bool {
    env("PULUMI_STAND_IN_FAIL").is_some_and(|knob| {
        knob.split(',')
            .map(str::trim)
            .any(|entry| match entry.split_once(':') {
                Some((o, p)) => o == op && p == project,
                None => entry == project,
            })
    })
}

fn secure(value: &Value) -> Option<&str> {
    value
        .as_object()
        .filter(|m| m.len() == 1)
        .and_then(|m| m.get("secure"))
        .and_then(Value::as_str)
}

/// `value` with every `{secure: …}` inside it decrypted.
fn open_secrets(value: &Value, passphrase: &str) -> Result<Value, Failure> {
    Ok(match value {
        v if secure(v).is_some() => {
            Value::String(backend::decrypt(secure(v).expect("secure"), passphrase)?)
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), open_secrets(v, passphrase)?)))
                .collect::<Result<_, Failure>>()?,
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| open_secrets(v, passphrase))
                .collect::<Result<_, Failure>>()?,
        ),
        other => other.clone(),
    })
}

/// `value` with every `{secure: …}` inside it shown as `[secret]`.
fn blind_secrets(value: &Value) -> Value {
    match value {
        v if secure(v).is_some() => Value::String("[secret]".into()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), blind_secrets(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(blind_secrets).collect()),
        other => other.clone(),
    }
}

fn plain_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Pulumi's guard against a secret stored in plain text: a secret-sounding key and a value with
/// high entropy.
fn looks_like_secret(key: &str, value: &str) -> bool {
    let name = key.rsplit(':').next().unwrap_or(key).to_lowercase();
    let secret_name = ["passwd", "pass", "password", "pwd", "secret", "token"]
        .iter()
        .any(|w| name.contains(w));
    if !secret_name || value.len() < 8 {
        return false;
    }
    let mut counts = std::collections::HashMap::new();
    for c in value.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
    }
    let n = value.chars().count() as f64;
    let entropy: f64 = counts
        .values()
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum();
    entropy >= 3.0
}

/// One step of a `--path` key below its top-level key.
enum Seg {
    Key(String),
    Index(usize),
}

/// `ns:a.b[0]["c.d"]` as Pulumi's `config --path` reads it: the top-level key (the namespace
/// belongs to it) and the steps below.
fn path_of(key: &str) -> Result<(String, Vec<Seg>), Failure> {
    let invalid = || Failure::new(1, format!("invalid configuration key '{key}'"));
    let mut segs = Vec::new();
    let mut rest = key;
    let top_end = rest.find(['.', '[']).unwrap_or(rest.len());
    let top = rest[..top_end].to_string();
    if top.is_empty() {
        return Err(invalid());
    }
    rest = &rest[top_end..];
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("[\"") {
            let end = r.find("\"]").ok_or_else(invalid)?;
            segs.push(Seg::Key(r[..end].to_string()));
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').ok_or_else(invalid)?;
            segs.push(Seg::Index(r[..end].parse().map_err(|_| invalid())?));
            rest = &r[end + 1..];
        } else if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return Err(invalid());
            }
            segs.push(Seg::Key(r[..end].to_string()));
            rest = &r[end..];
        } else {
            return Err(invalid());
        }
    }
    Ok((top, segs))
}

/// `config get --path`: the value below the top-level key, `None` when the path is not there.
fn get_path(values: &Map<String, Value>, key: &str) -> Result<Option<Value>, Failure> {
    let (top, segs) = path_of(key)?;
    let mut node = match values.get(&top) {
        Some(node) => node,
        None => return Ok(None),
    };
    for seg in &segs {
        let next = match seg {
            Seg::Key(name) => node.as_object().and_then(|m| m.get(name)),
            Seg::Index(i) => node.as_array().and_then(|a| a.get(*i)),
        };
        match next {
            Some(next) => node = next,
            None => return Ok(None),
        }
    }
    Ok(Some(node.clone()))
}

/// `config set --path a.b[0]`: the namespace applies to the first segment only; "true"/"false"
/// and integers below the top level become booleans and numbers.
/// `config rm --path`: what is at the path taken out of its mapping (or list); whether it was
/// there.
fn remove_path(file: &mut ConfigFile, key: &str) -> Result<bool, Failure> {
    let (top, segs) = path_of(key)?;
    let Some((last, way)) = segs.split_last() else {
        return Ok(file.remove(&top));
    };
    let Some(mut root) = file.values().get(&top).cloned() else {
        return Ok(false);
    };
    let mut node = &mut root;
    for seg in way {
        let next = match seg {
            Seg::Key(name) => node.as_object_mut().and_then(|m| m.get_mut(name)),
            Seg::Index(i) => node.as_array_mut().and_then(|a| a.get_mut(*i)),
        };
        match next {
            Some(next) => node = next,
            None => return Ok(false),
        }
    }
    let removed = match last {
        Seg::Key(name) => node
            .as_object_mut()
            .is_some_and(|m| m.remove(name).is_some()),
        Seg::Index(i) => match node.as_array_mut() {
            Some(items) if *i < items.len() => {
                items.remove(*i);
                true
            }
            _ => false,
        },
    };
    file.set(&top, root);
    Ok(removed)
}

fn set_path(file: &mut ConfigFile, key: &str, value: Value) -> Result<(), Failure> {
    let (top, segs) = path_of(key)?;
    let mut root = file.values().get(&top).cloned().unwrap_or(Value::Null);
    let coerced = match &value {
        Value::String(s) if !segs.is_empty() => match s.as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            s => s.parse::<i64>().map(Value::from).unwrap_or(value.clone()),
        },
        _ => value,
    };
    let mut node = &mut root;
    for seg in &segs {
        node = match seg {
            Seg::Key(name) => {
                if node.is_null() {
                    *node = Value::Object(Map::new());
                }
                node.as_object_mut()
                    .ok_or_else(|| Failure::new(1, format!("{key}: not a map")))?
                    .entry(name.clone())
                    .or_insert(Value::Null)
            }
            Seg::Index(i) => {
                if node.is_null() {
                    *node = Value::Array(Vec::new());
                }
                let items = node
                    .as_array_mut()
                    .ok_or_else(|| Failure::new(1, format!("{key}: not an array")))?;
                if *i == items.len() {
                    items.push(Value::Null);
                }
                items
                    .get_mut(*i)
                    .ok_or_else(|| Failure::new(1, format!("{key}: index out of range")))?
            }
        };
    }
    *node = coerced;
    file.set(&top, root);
    Ok(())
}
