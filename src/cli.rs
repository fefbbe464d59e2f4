//! The command line: clap definitions only. `settings` turns them into plain values.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const ABOUT: &str = "Deploy a platform made of many small Pulumi projects as one unit";

const LONG_ABOUT: &str = "\
Deploy a platform made of many small Pulumi projects as one unit.

mara reads one environment file and one shared stack configuration, takes the projects and their
dependencies from a provider (aws, do, linode, kubeconfig, k3d, or your own), builds the dependency
graph and runs each project in order, in parallel where the graph allows.";

const AFTER_HELP: &str = "\
Examples:
  mara up --provider aws --stack dev
  mara up --provider aws --stack prod --yes --report report.json
  mara preview --expect-no-changes
  mara destroy
  mara list-providers
  mara show-execution --provider aws
  mara show-execution --provider do --format mermaid
  mara validate --provider aws --stack dev

Exit codes:
  0    success
  1    a project failed
  2    usage error: a bad flag, or one the command does not use; a confirmation nobody can give
  3    validation or configuration error: nothing ran
  4    `drift` found drift, `preview --expect-no-changes` found changes, `ci generate --check`
       found the file out of date, an approved plan of `up --plans` no longer holds, or the
       policies deny the plan
  5    the stack is locked by another run (or the run lost its lease)
  6    not confirmed
  7    a job of a fanned-out run (`--run`) ran none of its projects: one they depend on has not
       succeeded
  130  interrupted
  `mara kubectl` and `mara images import` exit with the code of the tool they run";

#[derive(Debug, Parser)]
#[command(name = "mara", version = env!("MARA_VERSION"), about = ABOUT, long_about = LONG_ABOUT, after_help = AFTER_HELP)]
#[command(propagate_version = true, max_term_width = 100)]
#[command(disable_help_flag = true, disable_version_flag = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// Run as if started in DIR
    #[arg(short = 'C', long = "cwd", value_name = "DIR", global = true)]
    pub cwd: Option<PathBuf>,

    /// The stack of every project [default: MARA_STACK, then PULUMI_STACK]
    #[arg(short, long, value_name = "NAME", global = true)]
    pub stack: Option<String>,

    /// The provider [default: MARA_PROVIDER, then mara.toml, then the stack's kubernetes:infra_type]
    #[arg(short, long, value_name = "NAME", global = true)]
    pub provider: Option<String>,

    /// Say more (repeat for even more)
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    /// Say only what went wrong, besides the output asked for: no notes, warnings or progress
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// When to use colours (NO_COLOR is honoured)
    #[arg(long, value_enum, value_name = "WHEN", default_value_t, global = true)]
    pub color: ColorArg,

    /// Never ask a question (implied when CI is set or stdin is not a terminal)
    #[arg(long, global = true)]
    pub non_interactive: bool,

    /// Output for people, or JSON for programs
    #[arg(
        long,
        value_enum,
        value_name = "FORMAT",
        default_value_t,
        global = true
    )]
    pub output: OutputArg,

    /// Print help (a summary with -h)
    #[arg(short, long, action = clap::ArgAction::Help, global = true)]
    pub help: Option<bool>,

    /// Print the version
    #[arg(short = 'V', long, action = clap::ArgAction::Version, global = true)]
    pub version: Option<bool>,
}

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum OutputArg {
    #[default]
    Human,
    Json,
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ColorArg {
    #[default]
    Auto,
    Always,
    Never,
}

/// `--log-order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogOrderArg {
    /// Lines as they come, from every running project
    #[default]
    Stream,
    /// Each project's lines in one block when it ends
    Grouped,
}

/// The commands that run projects, with their options.
#[derive(Debug)]
pub enum RunCommand {
    Up(UpArgs),
    Preview(PreviewArgs),
    Refresh(RefreshArgs),
    Destroy(DestroyArgs),
    Drift(DriftArgs),
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Deploy the selected projects in graph order
    Up(UpArgs),

    /// Preview every selected project and show the combined changes
    Preview(PreviewArgs),

    /// Refresh each project's state from the real resources, in graph order
    Refresh(RefreshArgs),

    /// Destroy the selected projects in reverse graph order
    #[command(visible_alias = "down")]
    Destroy(DestroyArgs),

    /// Check, changing nothing, whether each deployed project still matches the cloud and its
    /// code: exit 4 when one does not
    Drift(DriftArgs),

    /// Print the stack outputs of every project (or one) as JSON
    Output(OutputArgs),

    /// Read or write the shared stack configuration (and, with --secret, the secrets project's)
    #[command(subcommand)]
    Config(ConfigCommand),

    /// The last run of the stack (or of every stack) and its projects
    Status {
        /// Keep showing a running run until it ends
        #[arg(long)]
        watch: bool,
    },

    /// Every recorded run, newest first
    History {
        /// At most this many runs (at least 1)
        #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
        /// Runs of every stack, not only this one
        #[arg(long)]
        all_stacks: bool,
    },

    /// A run's logs: every project's, or one project's
    Logs {
        /// The run id [default: the stack's last run]
        run: Option<String>,
        /// Only this project's log
        project: Option<String>,
        /// Keep printing as a running run writes
        #[arg(long)]
        follow: bool,
    },

    /// Stop the run holding the stack's lock, as Ctrl-C would
    Cancel,

    /// Show the run ledger in use; `migrate` copies it to a PostgreSQL server
    #[command(
        subcommand_required = false,
        after_help = "The ledger is this workspace's own (.mara/ledger.db) unless MARA_LEDGER_URL (postgres://user:password@host/database) or `ledger` in mara.toml (a URL without its password, which then comes from PGPASSWORD) names a PostgreSQL server. MARA_LEASE_SECONDS sets a server lock's lease (60)."
    )]
    Ledger {
        #[command(subcommand)]
        command: Option<LedgerCommand>,
    },

    /// The projects' state; `migrate` moves it into the ledger's server
    #[command(
        subcommand,
        after_help = "`state = \"ledger\"` in mara.toml keeps the state of every project that names no backend of its own in the ledger's PostgreSQL server (docs/commands.md, \"State in the ledger\")."
    )]
    State(StateCommand),

    /// Fan a deployment out over CI runners: one job per project
    #[command(subcommand)]
    Ci(CiCommand),

    /// The workspace's policies (policy/*.rego): run their tests, or evaluate them on a file
    #[command(
        subcommand,
        after_help = "Runs evaluate the policies by themselves: `preview`, `up` (before anything is applied), `destroy` (before anything is removed), `drift`; `up --plans` applies only plans these policies passed (docs/commands.md, \"Policies\")."
    )]
    Policy(PolicyCommand),

    /// Show the ledger's runs, locks and logs on a web page, live
    #[command(
        args_conflicts_with_subcommands = true,
        after_help = "The page and its JSON (/api/runs, /api/stacks) read the ledger. POST /api/runs/ID/cancel and /api/stacks/NAME/unlock act with `Authorization: Bearer TOKEN`, an operator's token (`mara serve token add NAME --role operator`, or MARA_SERVE_TOKEN), and the page offers both. On an address other than loopback, reading needs a token too (a viewer's is enough)."
    )]
    Serve {
        /// Where to listen: an address and port (port 0: any free one)
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7300")]
        listen: String,
        /// A host name the pages may be asked for, besides localhost, IP addresses and this
        /// machine's name (repeatable): the name a load balancer or DNS gives the server
        #[arg(long = "allow-host", value_name = "NAME")]
        allow_host: Vec<String>,
        #[command(subcommand)]
        command: Option<ServeCommand>,
    },

    /// Clear the stack's lock when the run holding it is gone
    Unlock {
        /// Clear mara's lock of the stack (its run must be gone: clearing a lock lets another
        /// run deploy the same stack)
        #[arg(long)]
        force: bool,

        /// Clear the locks the engines of a run that is gone may have kept on their stacks (each
        /// engine's own cancel, with the run's environment)
        #[arg(long)]
        engine: bool,
    },

    /// Run kubectl on the stack's cluster, through its kubeconfig (never your default context)
    #[command(
        after_help = "Examples:\n  mara kubectl get pods -A\n  mara -s prod kubectl -- logs -n nginx-ingress deploy/nginx-ingress"
    )]
    Kubectl {
        /// kubectl's arguments (after `--` when they start with a dash)
        #[arg(
            value_name = "ARGS",
            trailing_var_arg = true,
            allow_hyphen_values = true,
            num_args = 0..
        )]
        args: Vec<String>,
    },

    /// The stack's local k3d cluster: start, stop, delete, status
    #[command(
        subcommand,
        after_help = "The cluster of stack `dev` is the k3d cluster `mara-dev`. See docs/developer-loop.md."
    )]
    Cluster(ClusterCommand),

    /// Container images for the stack's local (k3d) cluster
    #[command(subcommand)]
    Images(ImagesCommand),

    /// Make this directory a workspace: a small runnable one, or mara.toml for the projects here
    #[command(
        after_help = "In a directory without projects: mara.toml, providers/starter.toml (a Terraform module and a command after it), the stack dev and its configuration, .gitignore. In a repository of projects (Pulumi.yaml files, Terraform modules): mara.toml for them — `projects_dir` where the built-in providers' projects are (the original MARA's pulumi/python), else a provider listing them. No file is overwritten."
    )]
    Init,

    /// List the providers, with their description and where each is defined
    ListProviders(ListProvidersArgs),

    /// Print the execution plan: which projects run, in what order, with what hooks and secrets
    ShowExecution(ShowExecutionArgs),

    /// Check the workspace, provider, configuration, projects and tools without changing anything
    Validate(ValidateArgs),

    /// Print a shell completion script
    Completions {
        /// The shell to complete for
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// The options of every command that runs projects; each command adds its own (`UpArgs`,
/// `PreviewArgs`, `RefreshArgs`, `DestroyArgs`), so that its help offers only what it does.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// How many projects run at once [default: `parallel` in mara.toml, else 4]
    #[arg(long, value_name = "N", value_parser = parallel)]
    pub parallel: Option<u16>,

    /// After a failure, go on with every project that does not depend on it
    #[arg(long)]
    pub keep_going: bool,

    /// Print every engine command with its directory, in order, and run none
    #[arg(long)]
    pub dry_run: bool,

    /// How engine output is printed
    #[arg(long, value_enum, value_name = "ORDER", default_value_t)]
    pub log_order: LogOrderArg,

    /// Write the JSON summary to FILE
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// Write a JUnit XML report to FILE (one test case per project)
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// Write the summary as one pull-request comment in Markdown to FILE
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,

    /// Record the projects under run ID, opened by `mara ci open` (a job of a fanned-out run)
    #[arg(long, value_name = "ID", conflicts_with = "dry_run")]
    pub run: Option<String>,

    #[command(flatten)]
    pub selection: SelectionArgs,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Do not ask for confirmation
    #[arg(short, long)]
    pub yes: bool,

    /// Repeat the last up on this stack, without the projects it completed
    #[arg(long, conflicts_with_all = ["only", "skip", "from", "with_dependencies", "with_dependents", "run"])]
    pub resume: bool,

    /// Only the projects whose inputs changed since their last successful up
    #[arg(long, conflicts_with_all = ["resume", "run"])]
    pub changed: bool,

    /// Apply the plans `preview --save-plans DIR` saved, refusing (exit 4) those that no
    /// longer hold; the plans are the approval: nothing is asked
    #[arg(long, value_name = "DIR", conflicts_with_all = ["resume", "changed", "run"])]
    pub plans: Option<PathBuf>,

    /// A project whose new plan differs from the approved one (of --plans, or of the
    /// confirmation) applies it all the same
    #[arg(long)]
    pub replan: bool,

    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct PreviewArgs {
    /// Only the projects whose inputs changed since their last successful up
    #[arg(long, conflicts_with = "run")]
    pub changed: bool,

    /// Exit with code 4 when any project would change
    #[arg(long)]
    pub expect_no_changes: bool,

    /// Show the properties that change, under each resource
    #[arg(long)]
    pub diff: bool,

    /// Keep each Terraform plan, and what every project planned against, in DIR (for `up --plans
    /// DIR`)
    #[arg(long, value_name = "DIR", conflicts_with = "run")]
    pub save_plans: Option<PathBuf>,

    /// A preview changes nothing and asks nothing: accepted, for scripts that pass it to every
    /// command, and not shown
    #[arg(short, long, hide = true)]
    pub yes: bool,

    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct DriftArgs {
    /// Show the properties that drifted, and that applying would change, under each resource
    #[arg(long)]
    pub diff: bool,

    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct RefreshArgs {
    /// Repeat the last refresh on this stack, without the projects it completed
    #[arg(long, conflicts_with_all = ["only", "skip", "from", "with_dependencies", "with_dependents", "run"])]
    pub resume: bool,

    /// Only the projects whose inputs changed since their last successful up
    #[arg(long, conflicts_with_all = ["resume", "run"])]
    pub changed: bool,

    /// A refresh asks nothing: accepted, for scripts that pass it to every command, and not shown
    #[arg(short, long, hide = true)]
    pub yes: bool,

    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct DestroyArgs {
    /// Do not ask for confirmation
    #[arg(short, long)]
    pub yes: bool,

    /// Repeat the last destroy on this stack, without the projects it completed
    #[arg(long, conflicts_with_all = ["only", "skip", "from", "with_dependencies", "with_dependents", "run"])]
    pub resume: bool,

    /// Also remove the stacks (`pulumi stack rm`) once their resources are destroyed
    #[arg(long)]
    pub remove: bool,

    /// Destroy the selection even though deployed projects outside it depend on it
    #[arg(long, conflicts_with = "with_dependents")]
    pub orphan_dependents: bool,

    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Only this project's outputs
    #[arg(value_name = "PROJECT")]
    pub project: Option<String>,

    /// Show secret outputs instead of [secret]
    #[arg(long)]
    pub show_secrets: bool,
}

#[derive(Debug, Subcommand)]
pub enum ImagesCommand {
    /// Load images from the local Docker into the stack's k3d cluster, and remember them
    Import {
        /// The images, as Docker names them (`name:tag`)
        #[arg(value_name = "IMAGE", required = true)]
        images: Vec<String>,
    },
    /// Import again every image imported before whose local image changed since
    Update,
    /// The images imported into the stack's cluster, as recorded
    List,
    /// Stop keeping images up to date (the cluster keeps what it has)
    Forget {
        /// The images, as they were imported
        #[arg(value_name = "IMAGE", required = true)]
        images: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Start the cluster: create it when it does not exist, start it when it is stopped
    Start,
    /// Stop the cluster; it keeps everything deployed on it for the next start
    Stop,
    /// Destroy everything deployed on the cluster, then the cluster (as `mara destroy` does)
    Delete {
        /// Do not ask for confirmation
        #[arg(short, long)]
        yes: bool,
    },
    /// Whether the cluster runs, its nodes, and the kubeconfig mara uses to reach it
    Status,
}

/// The operations a fanned-out run can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum CiOperation {
    #[default]
    Up,
    Preview,
    Refresh,
    Destroy,
    Drift,
}

/// A cron schedule as GitHub and GitLab take it: five fields (minute, hour, day of the month,
/// month, day of the week) of digits, names and `*/,-`.
fn cron(text: &str) -> Result<String, String> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let fits = |f: &&str| {
        f.chars()
            .all(|c| c.is_ascii_alphanumeric() || "*/,-".contains(c))
    };
    match fields.len() == 5 && fields.iter().all(fits) {
        true => Ok(fields.join(" ")),
        false => Err(format!(
            "`{text}` is not a cron schedule: five fields, minute hour day month weekday (\"0 6 * * 1-5\")"
        )),
    }
}

/// What starts a generated pipeline besides a person (GitHub's `workflow_dispatch`; on GitLab,
/// the pipeline that includes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CiTrigger {
    /// Each push to a pull request (GitHub's `pull_request`; on GitLab, `merge-request`: its
    /// merge-request pipelines): for a preview, its summary posted on the pull request
    #[value(
        name = "pull-request",
        alias = "pull_request",
        alias = "merge-request",
        alias = "merge_request"
    )]
    PullRequest,
}

/// The CI systems `mara ci generate` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CiSystem {
    /// A GitHub Actions workflow
    Github,
    /// A GitLab CI pipeline
    Gitlab,
}

/// A variable's name, as a shell and both CI systems take it.
fn variable_name(name: &str) -> Result<String, String> {
    let mut chars = name.chars();
    let starts = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    match starts && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        true => Ok(name.to_string()),
        false => {
            Err("a variable's name is letters, digits and `_`, not starting with a digit".into())
        }
    }
}

/// What `mara ci generate` takes.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    #[arg(value_enum)]
    pub system: CiSystem,
    /// The operation the pipeline runs
    #[arg(long, value_enum, default_value_t)]
    pub operation: CiOperation,
    /// Where to write it [default, in the repository's root:
    /// .github/workflows/mara-STACK-OPERATION.yml, or mara-STACK-OPERATION.gitlab-ci.yml]
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Write nothing; exit 4 when the file differs from what would be written
    #[arg(long)]
    pub check: bool,
    /// A command every job runs first, to put mara and the engines on the runner (written
    /// into the file)
    #[arg(long, value_name = "COMMAND")]
    pub setup: Option<String>,
    /// Every job installs this release of mara first (before the setup): from a release's
    /// archive with --install-from, its SHA-256 checked, else with `cargo install --locked`
    #[arg(long, value_name = "VERSION")]
    pub install: Option<String>,
    /// Where --install fetches the archive: a URL with {version} and {target}
    /// (https://github.com/OWNER/REPO/releases/download/v{version}/mara-{version}-{target}.tar.gz,
    /// or a mirror); its SHA-256 is the same URL with .sha256
    #[arg(long, value_name = "URL", requires = "install")]
    pub install_from: Option<String>,
    /// A secret of the CI's secret store given to mara's steps (cloud credentials:
    /// AWS_SECRET_ACCESS_KEY, PULUMI_ACCESS_TOKEN, …; the provider's own token, such as
    /// DIGITALOCEAN_TOKEN, is given already); repeatable
    #[arg(long = "env", value_name = "NAME", value_parser = variable_name)]
    pub env: Vec<String>,
    /// A plain variable given to mara's steps (GitHub's `vars.NAME`, a GitLab CI/CD
    /// variable); repeatable
    #[arg(long = "var", value_name = "NAME", value_parser = variable_name)]
    pub vars: Vec<String>,
    /// Let the jobs log in to a cloud with GitHub's OIDC token (`permissions: id-token:
    /// write`)
    #[arg(long)]
    pub oidc: bool,
    /// The stack configuration comes from this CI secret (a GitLab file variable, a GitHub
    /// secret holding the file), given to `ci open --config`: for a repository without it
    #[arg(long, value_name = "NAME", value_parser = variable_name)]
    pub config_secret: Option<String>,
    /// Run on a schedule too, as cron writes it ("0 6 * * 1-5"): GitHub's `schedule`; on GitLab
    /// the jobs run in scheduled pipelines, whose schedule is set in the project
    #[arg(long, value_name = "CRON", value_parser = cron)]
    pub schedule: Option<String>,
    /// Run the preview on each push to a pull request (`pull-request`; on GitLab, `merge-request`:
    /// only in merge-request pipelines)
    #[arg(long, value_enum, value_name = "EVENT")]
    pub on: Option<CiTrigger>,
    #[command(flatten)]
    pub selection: SelectionArgs,
}

#[derive(Debug, Subcommand)]
pub enum CiCommand {
    /// Write a GitHub Actions workflow or a GitLab CI pipeline: a job that opens the run, one job
    /// per project (needs: the graph's edges), a job that closes it
    Generate(GenerateArgs),
    /// Open a fanned-out run: check everything `up` checks, record the run, take the stack's lock
    Open {
        /// The run's id (the pipeline's, so that every job names the same run)
        #[arg(long, value_name = "ID")]
        run: String,
        /// The operation the run does
        #[arg(long, value_enum, default_value_t)]
        operation: CiOperation,
        /// How long the lock lasts between jobs without one renewing it, in seconds
        #[arg(long, value_name = "SECONDS", default_value_t = 1800, value_parser = clap::value_parser!(u64).range(60..=86400))]
        lease: u64,
        /// (`--operation destroy`) destroy the selection even though deployed projects outside
        /// it depend on it
        #[arg(long, conflicts_with = "with_dependents")]
        orphan_dependents: bool,
        /// The stack configuration the run carries to its jobs, from FILE (a CI secret file)
        /// rather than the repository's
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        #[command(flatten)]
        selection: SelectionArgs,
    },
    /// Close a fanned-out run: record the projects that did not run and why, the run's status,
    /// release the stack's lock, write the summary
    Close {
        /// The run's id, as `ci open` was given it
        #[arg(long, value_name = "ID")]
        run: String,
        /// Write the JSON summary to FILE
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
        /// Write a JUnit XML report to FILE (one test case per project)
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// Write the summary as one pull-request comment in Markdown to FILE
        #[arg(long, value_name = "FILE")]
        markdown: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Move the stack's state of every project that names no backend into the ledger's server
    /// (`state = "ledger"`): Terraform modules' local state, Pulumi stacks from where they are.
    /// Nothing moves if the server already holds any of them
    Migrate {
        /// Where the Pulumi stacks are now (`file://…`, `s3://…`); default PULUMI_BACKEND_URL
        /// of the environment, else Pulumi's login
        #[arg(long, value_name = "URL")]
        from: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ServeCommand {
    /// The named tokens of `mara serve`, kept (hashed) in the ledger: every server and every
    /// machine using the ledger sees the same
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token and print it, once, alone on the last line
    Add {
        /// Its name, as the audit and `token list` show it (letters, digits, . _ - @)
        name: String,
        /// viewer: reads the pages; operator: also cancels runs and clears locks
        #[arg(long, value_enum, value_name = "ROLE")]
        role: RoleArg,
    },
    /// The tokens: names, roles, when made and last used (never a value)
    List,
    /// Remove a token: a server refuses it from the next request on (401)
    Revoke {
        /// The token's name
        name: String,
    },
}

/// `--role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    Viewer,
    Operator,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Run every `test_` rule of the policies, as `opa test` does
    Test,
    /// Evaluate the policies on a JSON file (a plan shown as JSON, or with --deployment a
    /// deployment's input): print each message, exit 4 when one denies
    Eval {
        /// The input: a JSON file (`-`: standard input)
        #[arg(value_name = "FILE")]
        input: std::path::PathBuf,
        /// Evaluate the deployment packages (`[policy] deployment_packages`), not the
        /// per-project ones
        #[arg(long)]
        deployment: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Copy this workspace's own ledger (`.mara/ledger.db`) into a PostgreSQL one: every run,
    /// what is deployed, the stacks known; runs the server has already are left as they are
    Migrate {
        /// The server (`postgres://user@host/database`); default MARA_LEDGER_URL
        #[arg(long, value_name = "URL")]
        to: Option<String>,
    },
    /// Remove old runs from the ledger and their log files, as `[retention]` in mara.toml (or
    /// these flags) says: never a running run, one holding a lock, or a stack's newest
    Prune {
        /// Keep the runs started in the last N days [default: `retention.days`]
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        days: Option<u32>,
        /// Keep the newest N runs [default: `retention.runs`]
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        runs: Option<u32>,
        /// Say what would be removed, and remove nothing
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print one key's value (a secret as [secret] unless --show-secrets)
    Get {
        /// `namespace:key` (with --path, `namespace:key.inner[0]`)
        key: String,
        /// Decrypt a secret value
        #[arg(long)]
        show_secrets: bool,
        /// The key is a path into a structured value
        #[arg(long)]
        path: bool,
    },
    /// Set one key: in the shared configuration, or with --secret encrypted in the secrets project
    Set {
        /// `namespace:key` (with --path, `namespace:key.inner[0]`)
        key: String,
        /// The value; without it, read from standard input, or asked for on a terminal (a secret's
        /// always is: never on a command line)
        value: Option<String>,
        /// Store it encrypted in the secrets project; the value comes from standard input or a
        /// hidden prompt
        #[arg(long)]
        secret: bool,
        /// The key is a path into a structured value
        #[arg(long)]
        path: bool,
    },
    /// Remove one key: from the shared configuration, or from the secrets project where it is
    /// a secret
    Rm {
        /// `namespace:key` (with --path, `namespace:key.inner`)
        key: String,
        /// The key is a path into a structured value
        #[arg(long)]
        path: bool,
    },
    /// Every key of the shared configuration and the secrets project, each once (secrets as
    /// [secret])
    List,
}

#[derive(Debug, Args)]
pub struct ListProvidersArgs {
    /// Also list abstract providers, which exist only to be extended
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct ShowExecutionArgs {
    /// How to print the plan [default: tree, or json with --output json]
    #[arg(long, value_enum)]
    pub format: Option<PlanFormat>,

    /// Show the plan of every provider
    #[arg(long, conflicts_with_all = ["only", "skip", "from"])]
    pub all: bool,

    /// Say for every project whether `mara up --changed` would run it, and why
    #[arg(long, conflicts_with = "all")]
    pub changed: bool,

    #[command(flatten)]
    pub selection: SelectionArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanFormat {
    /// The original runner's tree, by stage, with hooks and secrets
    Tree,
    /// One project path per line, in execution order
    List,
    /// Graphviz
    Dot,
    /// A Mermaid flowchart
    Mermaid,
    /// The plan as JSON
    Json,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub selection: SelectionArgs,
}

/// The selection flags (docs/commands.md, "Selection"), shared by every command that plans.
#[derive(Debug, Args, Default)]
#[command(next_help_heading = "Selection")]
pub struct SelectionArgs {
    /// Only this project (a path, or its last segments when unique); repeatable
    #[arg(long, value_name = "PROJECT")]
    pub only: Vec<String>,

    /// Leave this project out; repeatable
    #[arg(long, value_name = "PROJECT")]
    pub skip: Vec<String>,

    /// This project and everything after it in the order
    #[arg(long, value_name = "PROJECT")]
    pub from: Option<String>,

    /// Add every project the selection depends on
    #[arg(long)]
    pub with_dependencies: bool,

    /// Add every project that depends on the selection
    #[arg(long)]
    pub with_dependents: bool,
}

/// `--parallel N`: said as `parallel` in mara.toml is, a whole number from 1 to 65,535.
fn parallel(text: &str) -> Result<u16, String> {
    match text.trim().parse::<u64>() {
        Ok(n) if n >= 1 && n <= u64::from(u16::MAX) => Ok(n as u16),
        _ => Err(format!("must be a whole number from 1 to {}", u16::MAX)),
    }
}
