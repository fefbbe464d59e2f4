//! Flags and the process environment, merged into plain settings: the clap types stop here.
//! Each `resolve` destructures every field of its flags, so that a flag nobody handles fails to
//! compile. `run` does the same for the options of `up`, `preview`, `refresh` and `destroy`;
//! `flags` refuses a global flag the command would not use.

pub mod flags;
pub mod run;

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::cli::{ColorArg, GlobalArgs, OutputArg, SelectionArgs};
use crate::graph::Selection;
use crate::style::{ColorChoice, Style};

/// What a command prints: text for people, or JSON for programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    #[default]
    Human,
    Json,
}

/// Where the provider name of this invocation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderSource {
    Flag,
    MaraProviderVariable,
}

#[derive(Debug, Clone)]
pub struct Settings {
    /// Where to look for the workspace.
    pub start_dir: PathBuf,
    pub stack: Option<String>,
    pub provider: Option<(String, ProviderSource)>,
    /// -1 quiet, 0 normal, 1.. verbose.
    pub verbosity: i8,
    pub stdout_style: Style,
    pub stderr_style: Style,
    /// Whether mara may ask questions.
    pub interactive: bool,
    /// Whether a CI system runs mara (`CI` is set): no live view.
    pub ci: bool,
    /// Whether a run may draw its live view (spinners) on standard error: a terminal there, no
    /// CI, and output for people.
    pub live: bool,
    pub output: OutputFormat,
    /// The process environment, read once.
    pub env: BTreeMap<String, String>,
}

/// Which of the process's standard streams are terminals (`main` looks; settings only decide).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Terminals {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

impl Settings {
    /// `mara ARGS` as the user would type it again: with the `-C`, `--stack` and `--provider`
    /// given to this invocation, so that a hint's command acts on the same stack — those of them
    /// the command takes (`mara -p aws cancel` would be refused: `flags::hint_takes`).
    pub fn again(&self, args: &str) -> String {
        let quote = crate::engine::shell_quote;
        let (takes_stack, takes_provider) = flags::hint_takes(args);
        let mut words = vec!["mara".to_string()];
        if self.start_dir != std::path::Path::new(".") {
            words.push(format!(
                "-C {}",
                quote(&self.start_dir.display().to_string())
            ));
        }
        if let Some(stack) = self.stack.as_ref().filter(|_| takes_stack) {
            words.push(format!("-s {}", quote(stack)));
        }
        if let Some((provider, ProviderSource::Flag)) =
            self.provider.as_ref().filter(|_| takes_provider)
        {
            words.push(format!("-p {}", quote(provider)));
        }
        words.push(args.to_string());
        words.join(" ")
    }

    /// `mara` as the user typed it (`again` without arguments): `mara -C dir -s staging`.
    pub fn invoked(&self) -> String {
        self.again("").trim_end().to_string()
    }

    pub fn resolve(
        global: GlobalArgs,
        env: BTreeMap<String, String>,
        terminals: Terminals,
    ) -> Settings {
        let GlobalArgs {
            cwd,
            stack,
            provider,
            verbose,
            quiet,
            color,
            non_interactive,
            output,
            // Acted on by clap itself: the help or the version printed, nothing run.
            help: _,
            version: _,
        } = global;
        let no_color = env.get("NO_COLOR").is_some_and(|v| !v.is_empty());
        let ci = env
            .get("CI")
            .is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
        let provider = provider
            .map(|name| (name, ProviderSource::Flag))
            .or_else(|| {
                env.get("MARA_PROVIDER")
                    .filter(|v| !v.is_empty())
                    .map(|v| (v.clone(), ProviderSource::MaraProviderVariable))
            });
        let color = match color {
            ColorArg::Auto => ColorChoice::Auto,
            ColorArg::Always => ColorChoice::Always,
            ColorArg::Never => ColorChoice::Never,
        };
        let output = match output {
            OutputArg::Human => OutputFormat::Human,
            OutputArg::Json => OutputFormat::Json,
        };
        Settings {
            start_dir: cwd.unwrap_or_else(|| PathBuf::from(".")),
            stack,
            provider,
            verbosity: if quiet { -1 } else { verbose.min(3) as i8 },
            stdout_style: color.style_for(no_color, terminals.stdout),
            stderr_style: color.style_for(no_color, terminals.stderr),
            interactive: !non_interactive && !ci && terminals.stdin,
            ci,
            live: terminals.stderr && !ci && output == OutputFormat::Human,
            output,
            env,
        }
    }
}

impl From<SelectionArgs> for Selection {
    fn from(args: SelectionArgs) -> Selection {
        let SelectionArgs {
            only,
            skip,
            from,
            with_dependencies,
            with_dependents,
        } = args;
        Selection {
            only,
            skip,
            from,
            with_dependencies,
            with_dependents,
        }
    }
}
