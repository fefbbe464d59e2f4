//! A fanned-out run as a GitHub Actions workflow.

use std::collections::BTreeSet;

use super::pipeline::{
    PREVIEW_FILE, Pipeline, close_command, header, open_command, operation_word, project_command,
    quoted,
};
use crate::cli::CiTrigger;

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
    // A pull request's preview: on each push to it, its summary posted as one comment.
    let (on, comment) = match pull_requests {
        true => ("  pull_request: {}\n", "  pull-requests: write\n"),
        false => ("", ""),
    };
    out.push_str(&format!(
        "name: mara {operation} {}\n\non:\n{on}  workflow_dispatch: {{}}\n\npermissions:\n  contents: read\n{comment}{id_token}\n",
        pipeline.stack
    ));
    out.push_str(&match pull_requests {
        // Previews hold no lock: each pull request's run at once, a newer push replacing its
        // pull request's run in progress.
        true => format!(
            "# One preview per pull request at a time, the newest push's.\nconcurrency:\n  group: mara-{}-preview-${{{{ github.event.pull_request.number || github.ref }}}}\n  cancel-in-progress: true\n\n",
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
    // The secrets reach mara's own step only: not the checkout, not the setup; and each job's
    // only those it needs.
    // The engines' credentials (`--env`, `--var`) go to the jobs that run engines, not the close.
    let secrets = |names: &BTreeSet<String>, credentials: bool| {
        let mut env = String::from(
            "        env:\n          MARA_LEDGER_URL: ${{ secrets.MARA_LEDGER_URL }}\n",
        );
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
    };
    out.push_str("\njobs:\n");
    let job = |out: &mut String,
               (id, name): (&str, &str),
               needs: &[String],
               always: bool,
               run: &str,
               names: &BTreeSet<String>| {
        out.push_str(&format!("  {id}:\n    name: {}\n", quoted(name)));
        if !needs.is_empty() {
            out.push_str(&format!("    needs: [{}]\n", needs.join(", ")));
        }
        if always {
            out.push_str("    if: ${{ always() }}\n");
        }
        out.push_str("    runs-on: ubuntu-latest\n    steps:\n      - uses: actions/checkout@v4\n");
        if let Some(setup) = &pipeline.setup {
            out.push_str(&format!("      - run: {}\n", quoted(setup)));
        }
        out.push_str(&format!(
            "      - run: {}\n{}",
            quoted(run),
            secrets(names, id != "mara-close")
        ));
    };
    let open = ("mara-open", "open the run");
    let mut open_secrets = pipeline.secrets.clone();
    open_secrets.extend(pipeline.config_secret.clone());
    job(
        &mut out,
        open,
        &[],
        false,
        &open_command(pipeline),
        &open_secrets,
    );
    for j in &pipeline.jobs {
        out.push('\n');
        let run = project_command(pipeline, &j.path);
        job(
            &mut out,
            (&j.id, &j.path),
            &j.needs,
            false,
            &run,
            &pipeline.job_secrets(j),
        );
    }
    out.push('\n');
    let mut all: Vec<String> = vec!["mara-open".into()];
    all.extend(pipeline.jobs.iter().map(|j| j.id.clone()));
    let close = ("mara-close", "close the run");
    job(
        &mut out,
        close,
        &all,
        true,
        &close_command(pipeline, ""),
        &BTreeSet::new(),
    );
    if pipeline.on == Some(CiTrigger::PullRequest) {
        out.push_str(&comment_step(pipeline));
    }
    out
}

/// The close job's last step on a pull request: its preview's summary posted as one comment,
/// the one found by its first line (`report::comment_marker`) updated on every later push. It
/// runs when the close job fails too (the preview failed): the comment says why. A forked
/// repository's pull request gets a read-only token, and no comment.
fn comment_step(pipeline: &Pipeline) -> String {
    let marker = crate::ui::report::comment_marker(&pipeline.provider, &pipeline.stack);
    let comments = "repos/$GITHUB_REPOSITORY/issues";
    let script = [
        format!("test -f {PREVIEW_FILE} || exit 0"),
        format!("jq -Rs '{{body: .}}' {PREVIEW_FILE} > \"$RUNNER_TEMP/mara-comment.json\""),
        format!(
            "ids=$(gh api \"{comments}/$PR/comments\" --paginate --jq '.[] | select(.user.login == \"github-actions[bot]\" and (.body | startswith(\"{marker}\"))) | .id')"
        ),
        // Not `| head`: it would end the pipeline early, which the step's `pipefail` fails.
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
        "      - name: post the preview on the pull request\n        if: ${{ always() && github.event_name == 'pull_request' }}\n        env:\n          GH_TOKEN: ${{ github.token }}\n          PR: ${{ github.event.pull_request.number }}\n        run: |\n",
    );
    for line in script {
        step.push_str(&format!("          {line}\n"));
    }
    step
}
