//! Which global options each command uses (docs/commands.md, "Global options"): one given to a
//! command that would not use it is refused (exit 2), never taken silently — a
//! `completions bash --provider nope` that says nothing lets its user think a provider counted.
//!
//! `-v`, `-q`, `--color` and `--non-interactive` say how mara speaks, not what it does: every
//! command takes them (a command that never asks honours `--non-interactive` as it is), as
//! `preview` takes `--yes`, for scripts that pass them to every command. `--output human` is
//! what every command does without it. The others name what a command acts on (`-C`, `-s`,
//! `-p`) or the form of its output (`--output json`); the table below says, for each command,
//! those it does not use and why (docs/decisions.md, "Help and flags").

use crate::cli::{
    Command, ConfigCommand, GlobalArgs, OutputArg, ServeCommand, ShowExecutionArgs, TokenCommand,
};
use crate::error::{Error, Problem, Result};

/// A global option some commands do not use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flag {
    Cwd,
    Stack,
    Provider,
    Json,
}

impl Flag {
    fn shown(self) -> &'static str {
        match self {
            Flag::Cwd => "-C/--cwd",
            Flag::Stack => "-s/--stack",
            Flag::Provider => "-p/--provider",
            Flag::Json => "--output json",
        }
    }
}

/// Why a command does not use a flag, and what to do instead.
struct Unused {
    flag: Flag,
    why: &'static str,
    hint: &'static str,
}

const LEAVE_IT_OUT: &str = "leave it out";

fn unused(flag: Flag, why: &'static str) -> Unused {
    Unused {
        flag,
        why,
        hint: LEAVE_IT_OUT,
    }
}

/// Refuses every global flag given to `command` that it does not use, each said on its own line.
pub fn refuse_unused(global: &GlobalArgs, command: &Command) -> Result<()> {
    let given = |flag: Flag| match flag {
        Flag::Cwd => global.cwd.is_some(),
        Flag::Stack => global.stack.is_some(),
        Flag::Provider => global.provider.is_some(),
        Flag::Json => global.output == OutputArg::Json,
    };
    let (name, table) = uses(command);
    let mut problems: Vec<Problem> = table
        .into_iter()
        .filter(|u| given(u.flag))
        .map(|u| {
            Problem::new(format!(
                "`mara {name}` does not use {}: {}",
                u.flag.shown(),
                u.why
            ))
            .hint(u.hint)
        })
        .collect();
    match problems.len() {
        0 => Ok(()),
        1 => Err(Error::usage(problems.remove(0))),
        _ => Err(Error::UsageProblems(problems)),
    }
}

/// Whether `mara ARGS`, a command a hint names (`cancel`, `unlock --force`), takes `-s` and
/// `-p`: `Settings::again` gives it those of this invocation only where it does, so that a hint
/// never names a command its flags would have refused. A command that does not parse keeps both.
pub fn hint_takes(args: &str) -> (bool, bool) {
    let words = std::iter::once("mara").chain(args.split_whitespace());
    let Ok(cli) = <crate::cli::Cli as clap::Parser>::try_parse_from(words) else {
        return (true, true);
    };
    let table = uses(&cli.command).1;
    let takes = |flag: Flag| !table.iter().any(|u| u.flag == flag);
    (takes(Flag::Stack), takes(Flag::Provider))
}

const RUNS_BY_STACK: &str = "the ledger finds runs by their stack, whatever the provider";
const NO_RESULT: &str = "it prints no result: its exit code says whether it was done";

/// The command as typed (`config list`, `serve token add`), and the flags it does not use.
fn uses(command: &Command) -> (&'static str, Vec<Unused>) {
    match command {
        Command::Up(_) => ("up", vec![]),
        Command::Preview(_) => ("preview", vec![]),
        Command::Refresh(_) => ("refresh", vec![]),
        Command::Destroy(_) => ("destroy", vec![]),
        Command::Drift(_) => ("drift", vec![]),
        Command::Output(_) => ("output", vec![]),
        Command::Config(command) => config(command),
        Command::Status { .. } => ("status", vec![unused(Flag::Provider, RUNS_BY_STACK)]),
        Command::History { all_stacks, .. } => ("history", history(*all_stacks)),
        Command::Logs { .. } => ("logs", vec![unused(Flag::Provider, RUNS_BY_STACK)]),
        Command::Cancel => ("cancel", vec![unused(Flag::Provider, RUNS_BY_STACK)]),
        Command::Unlock { engine, .. } => ("unlock", unlock(*engine)),
        Command::Ledger { .. } => (
            "ledger",
            workspace_wide("the ledger is the workspace's, for every stack"),
        ),
        Command::State(_) => ("state migrate", vec![]),
        Command::Ci(_) => ("ci", vec![]),
        Command::Policy(_) => (
            "policy",
            workspace_wide("the policies are the workspace's, for every stack"),
        ),
        Command::Serve { command, .. } => serve(command.as_ref()),
        Command::Kubectl { .. } => ("kubectl", kubectl()),
        Command::Cluster(_) => ("cluster", vec![]),
        Command::Images(_) => ("images", vec![]),
        Command::Init => ("init", init()),
        Command::ListProviders(_) => ("list-providers", list_providers()),
        Command::ShowExecution(args) => ("show-execution", show_execution(args)),
        Command::Validate(_) => ("validate", vec![]),
        Command::Completions { .. } => ("completions", completions()),
    }
}

fn history(all_stacks: bool) -> Vec<Unused> {
    let mut table = vec![unused(Flag::Provider, RUNS_BY_STACK)];
    if all_stacks {
        table.push(Unused {
            flag: Flag::Stack,
            why: "--all-stacks lists the runs of every stack",
            hint: "leave out --all-stacks for one stack's runs, or --stack for every stack's",
        });
    }
    table
}

fn unlock(engine: bool) -> Vec<Unused> {
    let mut table = vec![Unused {
        flag: Flag::Json,
        why: "it says what it cleared in words only",
        hint: "`mara status --output json` says whether the stack is locked, and by which run",
    }];
    if !engine {
        table.push(Unused {
            flag: Flag::Provider,
            why: "mara's lock is the stack's, whatever the provider",
            hint: "leave it out: only `unlock --engine` reads the provider's projects",
        });
    }
    table
}

fn serve(command: Option<&ServeCommand>) -> (&'static str, Vec<Unused>) {
    match command {
        None => (
            "serve",
            workspace_wide("its pages show every stack of the ledger"),
        ),
        Some(ServeCommand::Token(token)) => {
            let name = match token {
                TokenCommand::Add { .. } => "serve token add",
                TokenCommand::List => "serve token list",
                TokenCommand::Revoke { .. } => "serve token revoke",
            };
            (
                name,
                workspace_wide("a token is the ledger's, for every stack"),
            )
        }
    }
}

fn kubectl() -> Vec<Unused> {
    vec![
        unused(
            Flag::Provider,
            "the stack's kubeconfig is found from the stack alone",
        ),
        Unused {
            flag: Flag::Json,
            why: "kubectl's output is kubectl's own",
            hint: "ask kubectl for JSON: `mara kubectl get pods -o json`",
        },
    ]
}

fn init() -> Vec<Unused> {
    vec![
        Unused {
            flag: Flag::Stack,
            why: "it makes the workspace, whose stack is `dev` until another is named",
            hint: "leave it out; `mara -s NAME up` later makes stack NAME",
        },
        Unused {
            flag: Flag::Provider,
            why: "it finds the projects the directory holds (or writes the starter's provider)",
            hint: "leave it out; mara.toml's `provider` names the one to use",
        },
    ]
}

fn list_providers() -> Vec<Unused> {
    vec![
        unused(Flag::Stack, "it lists the providers, whatever the stack"),
        Unused {
            flag: Flag::Provider,
            why: "it lists every provider",
            hint: "`mara show-execution --provider NAME` shows one provider's plan",
        },
    ]
}

fn completions() -> Vec<Unused> {
    let why = "a completion script is the same for every workspace, stack and provider";
    [Flag::Cwd, Flag::Stack, Flag::Provider]
        .into_iter()
        .map(|flag| unused(flag, why))
        .chain([unused(Flag::Json, "a completion script is for a shell")])
        .collect()
}

/// `config`: `set` and `rm` print no result; `rm` and `list` read no provider.
fn config(command: &ConfigCommand) -> (&'static str, Vec<Unused>) {
    let files = "it reads the stack's configuration files, whatever the provider";
    match command {
        ConfigCommand::Get { .. } => ("config get", vec![]),
        ConfigCommand::Set { .. } => ("config set", vec![unused(Flag::Json, NO_RESULT)]),
        ConfigCommand::Rm { .. } => (
            "config rm",
            vec![unused(Flag::Provider, files), unused(Flag::Json, NO_RESULT)],
        ),
        ConfigCommand::List => ("config list", vec![unused(Flag::Provider, files)]),
    }
}

/// `show-execution --all` shows every provider, and reads no stack.
fn show_execution(args: &ShowExecutionArgs) -> Vec<Unused> {
    match args.all {
        false => vec![],
        true => [Flag::Stack, Flag::Provider]
            .into_iter()
            .map(|flag| Unused {
                flag,
                why: "--all shows the plan of every provider, whatever the stack",
                hint: "leave out --all to see the plan of one provider",
            })
            .collect(),
    }
}

/// A command about the whole workspace: no stack, no provider.
fn workspace_wide(why: &'static str) -> Vec<Unused> {
    vec![unused(Flag::Stack, why), unused(Flag::Provider, why)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn refused(args: &[&str]) -> Vec<String> {
        let cli = crate::cli::Cli::try_parse_from(["mara"].iter().chain(args)).unwrap();
        match refuse_unused(&cli.global, &cli.command) {
            Ok(()) => Vec::new(),
            Err(error) => {
                assert_eq!(error.exit_code(), crate::error::exit::USAGE);
                error.problems().iter().map(|p| p.message.clone()).collect()
            }
        }
    }

    #[test]
    fn a_flag_is_refused_only_where_the_command_does_not_use_it() {
        let every = ["-C", "dir", "-s", "dev", "-p", "aws", "--output", "json"];
        for command in [
            &["up"][..],
            &["destroy", "--yes"],
            &["output"],
            &["config", "get", "a:b"],
            &["state", "migrate"],
            &["ci", "generate", "github"],
            &["ci", "close", "--run", "1"],
            &["cluster", "status"],
            &["images", "list"],
            &["show-execution", "--changed"],
            &["validate"],
        ] {
            let args: Vec<&str> = every.iter().chain(command).copied().collect();
            assert_eq!(refused(&args), Vec::<String>::new(), "{command:?}");
        }
        // Where an option of the command decides.
        assert!(refused(&["-p", "aws", "unlock", "--engine"]).is_empty());
        assert_eq!(refused(&["-p", "aws", "unlock"]).len(), 1);
        assert!(refused(&["-s", "dev", "history"]).is_empty());
        assert_eq!(refused(&["-s", "dev", "history", "--all-stacks"]).len(), 1);
        assert!(refused(&["-s", "dev", "-p", "aws", "show-execution"]).is_empty());
        let all = refused(&["-s", "dev", "-p", "aws", "show-execution", "--all"]);
        assert_eq!(all.len(), 2, "{all:?}");
        assert!(all[0].starts_with("`mara show-execution` does not use -s/--stack"));
        // How mara speaks is every command's; `--output human` is every command's default.
        let speaking = [
            "-v",
            "--color",
            "never",
            "--non-interactive",
            "--output",
            "human",
        ];
        let args: Vec<&str> = speaking
            .iter()
            .chain(&["completions", "bash"])
            .copied()
            .collect();
        assert!(refused(&args).is_empty());
        assert!(refused(&["-q", "kubectl", "get", "pods"]).is_empty());
    }

    #[test]
    fn a_hint_names_a_command_with_the_flags_it_takes() {
        assert_eq!(hint_takes("cancel"), (true, false));
        assert_eq!(hint_takes("unlock --force"), (true, false));
        assert_eq!(hint_takes("unlock --engine"), (true, true));
        assert_eq!(hint_takes("config set --secret a:b"), (true, true));
        assert_eq!(hint_takes("up --only cluster"), (true, true));
        assert_eq!(hint_takes(""), (true, true));
        let cli =
            crate::cli::Cli::try_parse_from(["mara", "-s", "dev", "-p", "aws", "up"]).unwrap();
        let settings =
            super::super::Settings::resolve(cli.global, Default::default(), Default::default());
        assert_eq!(settings.again("cancel"), "mara -s dev cancel");
        assert_eq!(settings.again("up"), "mara -s dev -p aws up");
    }
}
