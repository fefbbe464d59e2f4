//! A fanned-out run as a GitHub Actions workflow.

use std::collections::BTreeSet;

use super::pipeline::{
    PREVIEW_FILE, Pipeline, close_command, header, open_command, operation_word, project_command,
    quoted,
};
use crate::cli::{CiOperation, CiTrigger};

/// The most jobs GitHub Actions runs in one workflow run.
pub(super) const GITHUB_MAX_JOBS: usize = 256;

/// The largest workflow file GitHub Actions starts a run of.
pub(super) const GITHUB_MAX_FILE: usize = 500 * 1024;

/// A workflow's header, trigger, permissions, concurrency and variables.
fn github_head(pipeline: &Pipeline) -> String {
    let mut out = header(pipeline);
    let operation = operation_word(pipeline.operation);
    // `--oidc`: the token a cloud login action asks GitHub for, and nothing more.
    let id_token = match pipeline.oidc {
        true => "  id-token: write\n",
        false => "",
    };
    let pull_requests = pipeline.on == Some(CiTrigger::PullRequest);
    // A pull request's preview: on each push to it, its summary posted as one comment (by the
    // close job, which alone may write on the pull request).
    let mut on = match pull_requests {
        true => "  pull_request: {}\n".to_string(),
        false => String::new(),
    };
    if let Some(cron) = &pipeline.schedule {
        on.push_str(&format!("  schedule:\n    - cron: {}\n", quoted(cron)));
    }
    out.push_str(&format!(
        "name: mara {operation} {}\n\non:\n{on}  workflow_dispatch: {{}}\n\npermissions:\n  contents: read\n{id_token}\n",
        pipeline.stack
    ));
    out.push_str(&match pull_requests {
        // Previews hold no lock: each pull request's run at once, a newer push replacing its
        // pull request's run in progress.
        true => format!(
            "# One preview per pull request at a time, the newest push's.\nconcurrency:\n  group: {}\n  cancel-in-progress: true\n\n",
            quoted(&format!(
                "mara-preview-{}-${{{{ github.event.pull_request.number || github.ref }}}}",
                pipeline.in_repository
            ))
        ),
        // A drift check holds no lock: its runs queue among themselves, not with deployments'.
        false if pipeline.operation == CiOperation::Drift => format!(
            "# One drift check of the stack at a time.\nconcurrency:\n  group: mara-{}-drift\n  cancel-in-progress: false\n\n",
            pipeline.stack
        ),
        false => format!(
            "# One fanned-out run of the stack at a time; mara's lease guards it across workflows too.\nconcurrency:\n  group: mara-{}\n  cancel-in-progress: false\n\n",
            pipeline.stack
        ),
    });
    out.push_str("env:\n");
    out.push_str(&format!(
        "  MARA_PROVIDER: {}\n",
        quoted(&pipeline.provider)
    ));
    out.push_str(&format!("  MARA_STACK: {}\n", quoted(&pipeline.stack)));
    // A workflow run's id is unique across GitHub.
    out.push_str("  MARA_RUN: gh-${{ github.run_id }}-${{ github.run_attempt }}\n");
    out
}

pub(super) fn github(pipeline: &Pipeline) -> String {
    let mut out = github_head(pipeline);
    out.push_str("\njobs:\n");
    let mut open_secrets = pipeline.secrets.clone();
    open_secrets.extend(pipeline.config_secret.clone());
    let open = Job {
        id: "mara-open",
        name: "open the run",
        needs: &[],
        run: &open_command(pipeline),
        secrets: &open_secrets,
    };
    out.push_str(&job(pipeline, &open));
    for j in &pipeline.jobs {
        let project = Job {
            id: &j.id,
            name: &j.path,
            needs: &j.needs,
            run: &project_command(pipeline, &j.path),
            secrets: &pipeline.job_secrets(j),
        };
        out.push('\n');
        out.push_str(&job(pipeline, &project));
    }
    let mut all: Vec<String> = vec!["mara-open".into()];
    all.extend(pipeline.jobs.iter().map(|j| j.id.clone()));
    let close = Job {
        id: "mara-close",
        name: "close the run",
        needs: &all,
        run: &close_command(pipeline, ""),
        secrets: &BTreeSet::new(),
    };
    out.push('\n');
    out.push_str(&job(pipeline, &close));
    if pipeline.on == Some(CiTrigger::PullRequest) {
        out.push_str(&comment_step(pipeline));
    }
    out
}

/// One job of the workflow, as `job` writes it.
struct Job<'a> {
    id: &'a str,
    name: &'a str,
    needs: &'a [String],
    run: &'a str,
    /// The secrets of the CI's store its mara step gets.
    secrets: &'a BTreeSet<String>,
}

fn job(pipeline: &Pipeline, job: &Job<'_>) -> String {
    let closing = job.id == "mara-close";
    let mut out = format!("  {}:\n    name: {}\n", job.id, quoted(job.name));
    if !job.needs.is_empty() {
        out.push_str(&format!("    needs: [{}]\n", job.needs.join(", ")));
    }
    if closing {
        // It closes the run whatever the jobs did.
        out.push_str("    if: ${{ always() }}\n");
        // The pull request's comment is the close job's alone: the project jobs run the pull
        // request's code, and never get the token that writes on it.
        if pipeline.on == Some(CiTrigger::PullRequest) {
            out.push_str("    permissions:\n      contents: read\n      pull-requests: write\n");
        }
    }
    out.push_str("    runs-on: ubuntu-latest\n    steps:\n      - uses: actions/checkout@v4\n");
    if let Some(setup) = &super::pipeline::setup_line(pipeline) {
        out.push_str(&setup_step(setup));
    }
    out.push_str(&format!(
        "      - run: {}\n{}",
        quoted(job.run),
        step_env(pipeline, job.secrets, !closing)
    ));
    out
}

/// The setup's step. GitHub runs each step in a shell of its own, so what the setup exports
/// (`export PATH=…`, a tool's `JAVA_HOME`) would end with its step, before mara's runs: the step
/// hands it on as GitHub has steps do, `PATH` to `$GITHUB_PATH` and each other variable it set
/// or changed to `$GITHUB_ENV`. It is a step of its own, not a part of mara's, so that it gets
/// none of the secrets mara's step is given. A setup that fails fails its step, whatever its
/// last command (`{ …; } || exit`: bash's `-e` lets an `a && b` whose `a` fails go on).
fn setup_step(setup: &str) -> String {
    let script = [
        "declare -A mara_before",
        "for mara_n in $(compgen -e); do mara_before[$mara_n]=${!mara_n}; done",
        &format!("{{ {setup}"),
        "} || exit $?",
        "for mara_n in $(compgen -e); do",
        "  case $mara_n in",
        "    _|PWD|OLDPWD|SHLVL|GITHUB_*|RUNNER_*) ;;",
        "    PATH) [ \"$PATH\" = \"${mara_before[PATH]-}\" ] || printf '%s\\n' \"$PATH\" >> \"$GITHUB_PATH\" ;;",
        "    *) if [ \"${mara_before[$mara_n]+set}\" != set ] || [ \"${mara_before[$mara_n]}\" != \"${!mara_n}\" ]; then",
        "         mara_eof=mara_eof_$RANDOM$RANDOM$RANDOM",
        "         printf '%s<<%s\\n%s\\n%s\\n' \"$mara_n\" \"$mara_eof\" \"${!mara_n}\" \"$mara_eof\" >> \"$GITHUB_ENV\"",
        "       fi ;;",
        "  esac",
        "done",
    ];
    let mut step = String::from(
        "      - name: setup (its PATH and variables kept for the next steps)\n        shell: bash\n        run: |\n",
    );
    for line in script {
        step.push_str(&format!("          {line}\n"));
    }
    step
}

/// A mara step's variables: the ledger's URL and `names` from the CI's secret store — the
/// secrets reach mara's own step only, not the checkout, not the setup — and, for a job that
/// runs engines (`credentials`), the engines' credentials (`--env`, `--var`).
fn step_env(pipeline: &Pipeline, names: &BTreeSet<String>, credentials: bool) -> String {
    let mut env =
        String::from("        env:\n          MARA_LEDGER_URL: ${{ secrets.MARA_LEDGER_URL }}\n");
    let (env_names, var_names): (&[String], &[String]) = match credentials {
        true => (&pipeline.env, &pipeline.vars),
        false => (&[], &[]),
    };
    for secret in names.iter().chain(env_names) {
        env.push_str(&format!(
            "          {secret}: ${{{{ secrets.{secret} }}}}\n"
        ));
    }
    for var in var_names {
        env.push_str(&format!("          {var}: ${{{{ vars.{var} }}}}\n"));
    }
    env
}

/// The first line of the pull-request comment of the workflow at `file` (in the repository):
/// how its step finds the comment again. A character beyond `[A-Za-z0-9_./-]` is `-`, so that
/// it is safe in the step's shell and jq.
pub(super) fn comment_marker(file: &str) -> String {
    let safe: String = (file.chars())
        .map(|c| match c.is_ascii_alphanumeric() || "_./-".contains(c) {
            true => c,
            false => '-',
        })
        .collect();
    format!("<!-- mara preview: {safe} -->")
}

/// The close job's last step on a pull request: its preview's summary posted as one comment,
/// the one found by its first line (`report::comment_marker`) updated on every later push, with
/// a link to the workflow run. It runs when the close job failed too (the preview failed: the
/// comment says why; the summary could not be made: the comment says so, rather than showing
/// an earlier push's), but not in a run that was cancelled (a newer push's run replaces it). A
/// forked repository's pull request gets a read-only token, and no comment.
fn comment_step(pipeline: &Pipeline) -> String {
    // The workflow's own marker in place of mara's first line: two workflows of one stack (two
    // selections) keep a comment each.
    let marker = comment_marker(&pipeline.in_repository);
    let comments = "repos/$GITHUB_REPOSITORY/issues";
    let body = "$RUNNER_TEMP/mara-comment.md";
    let script = [
        "run=\"$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/actions/runs/$GITHUB_RUN_ID\"".to_string(),
        format!("printf '%s\\n' '{marker}' > \"{body}\""),
        format!("if [ -f {PREVIEW_FILE} ]; then"),
        format!("  tail -n +2 {PREVIEW_FILE} >> \"{body}\""),
        "else".into(),
        format!(
            "  printf '\\nThe preview of this push could not be summarized: see the workflow run.\\n' >> \"{body}\""
        ),
        "fi".into(),
        format!(
            "printf '\\n[The workflow run](%s) · commit %s\\n' \"$run\" \"$HEAD_SHA\" >> \"{body}\""
        ),
        format!("jq -Rs '{{body: .}}' \"{body}\" > \"$RUNNER_TEMP/mara-comment.json\""),
        format!(
            "ids=$(gh api \"{comments}/$PR/comments\" --paginate --jq '.[] | select(.user.login == \"github-actions[bot]\" and (.body | startswith(\"{marker}\"))) | .id')"
        ),
        // The first; not `| head`, which may end a pipeline before its writer does.
        "id=$(printf '%s\\n' \"$ids\" | sed -n 1p)".into(),
        "if [ -n \"$id\" ]; then".into(),
        format!(
            "  gh api --method PATCH \"{comments}/comments/$id\" --input \"$RUNNER_TEMP/mara-comment.json\" > /dev/null"
        ),
        "else".into(),
        format!(
            "  gh api --method POST \"{comments}/$PR/comments\" --input \"$RUNNER_TEMP/mara-comment.json\" > /dev/null"
        ),
        "fi".into(),
    ];
    let mut step = String::from(
        "      - name: post the preview on the pull request\n        if: ${{ !cancelled() && github.event_name == 'pull_request' }}\n        env:\n          GH_TOKEN: ${{ github.token }}\n          PR: ${{ github.event.pull_request.number }}\n          HEAD_SHA: ${{ github.event.pull_request.head.sha }}\n        run: |\n",
    );
    for line in script {
        step.push_str(&format!("          {line}\n"));
    }
    step
}
