//! A fanned-out run as a GitHub Actions workflow.

use std::collections::BTreeSet;

use super::pipeline::{
    Pipeline, close_command, header, open_command, operation_word, project_command, quoted,
};

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
    out.push_str(&format!(
        "name: mara {operation} {}\n\non:\n  workflow_dispatch: {{}}\n\npermissions:\n  contents: read\n{id_token}\n",
        pipeline.stack
    ));
    out.push_str(&format!(
        "# One fanned-out run of the stack at a time; mara's lease guards it across workflows too.\nconcurrency:\n  group: mara-{}\n  cancel-in-progress: false\n\n",
        pipeline.stack
    ));
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
    out
}
