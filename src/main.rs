//! mara: deploy a platform made of many small Pulumi projects as one unit.
//!
//! `main` parses the command line, runs the command, and turns an error into its message and
//! exit code. Nothing else happens here.

// No function past 80 lines (`clippy.toml`), as in the library.
#![warn(clippy::too_many_lines)]

use std::io::Write;

/// Planning thousands of projects is mostly small allocations (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{CommandFactory, Parser};

use mara::cli::{Cli, ClusterCommand, Command, ImagesCommand, RunCommand, ServeCommand};
use mara::error::{Error, exit};
use mara::settings::Settings;
use mara::{commands, ui};

fn main() {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == mara::run::watchdog::ARG)
    {
        mara::run::watchdog::main();
    }
    // Started as a background job of a script, mara inherits SIGINT ignored, and an ignored signal
    // stays ignored across exec: its engines could not be interrupted. Its children must get the
    // default (mara's own handler, installed for a run, is reset to it by exec as well).
    // SAFETY: setting a signal's disposition to the default has no other effect.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    // A flag the command would not use is refused before anything is read (exit 2).
    let refused = mara::settings::flags::refuse_unused(&cli.global, &cli.command);
    let env = environment();
    let settings = Settings::resolve(cli.global, env, ui::terminals());
    init_tracing(settings.verbosity, settings.stderr_style.enabled);
    let result = refused.and_then(|()| dispatch(&settings, cli.command));
    let code = match result {
        Ok(()) => exit::SUCCESS,
        Err(error) => {
            if !matches!(error, Error::ToolFailed { .. }) {
                report(&error, settings.stderr_style);
            }
            error.exit_code()
        }
    };
    std::process::exit(code);
}

/// The environment mara reads and passes on to its engines: a variable whose name or value is
/// not UTF-8 (a shell passes any bytes) is left out, and said so, rather than ending mara
/// (docs/decisions.md, "A variable that is not UTF-8").
fn environment() -> std::collections::BTreeMap<String, String> {
    let mut env = std::collections::BTreeMap::new();
    for (name, value) in std::env::vars_os() {
        match (name.into_string(), value.into_string()) {
            (Ok(name), Ok(value)) => _ = env.insert(name, value),
            (name, _) => {
                let name = name.unwrap_or_else(|n| n.to_string_lossy().into_owned());
                ui::eprint(&format!(
                    "warning: the environment variable {name} is not UTF-8: mara leaves it out, and its engines do not get it\n"
                ));
            }
        }
    }
    env
}

/// The command asked for, run.
fn dispatch(settings: &Settings, command: Command) -> mara::error::Result<()> {
    match command {
        Command::Up(args) => commands::run::run(settings, RunCommand::Up(args)),
        Command::Preview(args) => commands::run::run(settings, RunCommand::Preview(args)),
        Command::Refresh(args) => commands::run::run(settings, RunCommand::Refresh(args)),
        Command::Drift(args) => commands::run::run(settings, RunCommand::Drift(args)),
        Command::Destroy(args) => commands::run::run(settings, RunCommand::Destroy(args)),
        Command::Output(args) => commands::output::run(settings, args),
        Command::Config(command) => commands::config::run(settings, command),
        Command::Status { watch } => commands::ledger::status(settings, watch),
        Command::History { limit, all_stacks } => {
            commands::ledger::history(settings, limit as usize, all_stacks)
        }
        Command::Logs {
            run,
            project,
            follow,
        } => commands::ledger::logs(settings, run, project, follow),
        Command::Cancel => commands::ledger::cancel(settings),
        Command::State(command) => commands::state::run(settings, command),
        Command::Ci(command) => commands::ci::run(settings, command),
        Command::Policy(command) => commands::policy::run(settings, command),
        Command::Serve {
            command: Some(ServeCommand::Token(command)),
            ..
        } => commands::serve::tokens::run(settings, command),
        Command::Serve {
            listen,
            allow_host,
            command: None,
        } => commands::serve::run(settings, &listen, allow_host),
        Command::Unlock { force, engine } => commands::ledger::unlock(settings, force, engine),
        Command::Ledger { command } => commands::ledger::ledger(settings, command),
        Command::Kubectl { args } => commands::cluster::kubectl(settings, args),
        Command::Cluster(command) => match command {
            ClusterCommand::Start => commands::cluster::start(settings),
            ClusterCommand::Stop => commands::cluster::stop(settings),
            ClusterCommand::Delete { yes } => commands::cluster::delete(settings, yes),
            ClusterCommand::Status => commands::cluster::status(settings),
        },
        Command::Images(ImagesCommand::Import { images }) => {
            commands::cluster::import_images(settings, images)
        }
        Command::Images(ImagesCommand::Update) => commands::cluster::update_images(settings),
        Command::Images(ImagesCommand::List) => commands::cluster::list_images(settings),
        Command::Images(ImagesCommand::Forget { images }) => {
            commands::cluster::forget_images(settings, images)
        }
        Command::Init => commands::init::run(settings),
        Command::ListProviders(args) => commands::list_providers::run(settings, args),
        Command::ShowExecution(args) => commands::show_execution::run(settings, args),
        Command::Validate(args) => commands::validate::run(settings, args.selection.into()),
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "mara", &mut out);
            ui::print(&String::from_utf8_lossy(&out))
        }
    }
}

/// `error: …` for each problem (with its hint), then `caused by: …` for each underlying cause.
fn report(error: &Error, style: ui::Style) {
    let mut text = String::new();
    let label = style.red(&style.bold("error:"));
    match error.problems() {
        [] => text.push_str(&format!("{label} {error}\n")),
        problems => {
            for problem in problems {
                text.push_str(&format!("{label} {problem}\n"));
                if let Some(hint) = &problem.hint {
                    text.push_str(&format!("  {} {hint}\n", style.cyan("hint:")));
                }
            }
        }
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!("caused by: {cause}\n"));
        source = cause.source();
    }
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Diagnostics on stderr: warnings by default, more with each `-v`, errors only with `-q`.
/// `MARA_LOG` (an `EnvFilter` directive) overrides.
fn init_tracing(verbosity: i8, ansi: bool) {
    let level = match verbosity {
        i8::MIN..=-1 => "error",
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("MARA_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("mara={level}")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .without_time()
        .with_target(false)
        .init();
}
