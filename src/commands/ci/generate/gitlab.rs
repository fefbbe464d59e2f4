//! A fanned-out run as a GitLab CI pipeline.

use super::pipeline::{
    Job, PREVIEW_FILE, Pipeline, close_command, header, open_command, project_command, quoted,
};
use crate::cli::{CiOperation, CiTrigger};

pub(super) fn gitlab(pipeline: &Pipeline) -> String {
    let mut out = header(pipeline);
    out.push_str("\nstages: [mara-open, mara-projects, mara-close]\n\n");
    out.push_str("variables:\n");
    out.push_str(&format!(
        "  MARA_PROVIDER: {}\n",
        quoted(&pipeline.provider)
    ));
    out.push_str(&format!("  MARA_STACK: {}\n", quoted(&pipeline.stack)));
    // Project and pipeline ids are an instance's own: two GitLabs sharing a ledger have both.
    out.push_str("  MARA_RUN: gl-$CI_SERVER_HOST-$CI_PROJECT_ID-$CI_PIPELINE_ID\n");
    let names: Vec<&str> = (pipeline
        .secrets
        .iter()
        .chain(&pipeline.env)
        .chain(&pipeline.vars))
    .map(String::as_str)
    .collect();
    let names: String = names.iter().map(|n| format!(", {n}")).collect();
    if let Some(cron) = &pipeline.schedule {
        out.push_str(&format!(
            "# Its jobs run in scheduled pipelines: set the schedule (`{cron}`) in the project's\n# Build > Pipeline schedules; GitLab keeps schedules outside the file.\n"
        ));
    }
    out.push_str(&match pipeline.on {
        None => format!(
            "# MARA_LEDGER_URL{names} are the project's CI/CD variables (protected; masked where GitLab\n# can mask them).\n"
        ),
        // A merge request's pipeline runs on its source branch, which is seldom protected.
        Some(CiTrigger::PullRequest) => format!(
            "# MARA_LEDGER_URL{names} are the project's CI/CD variables (masked where GitLab can\n# mask them; not protected: GitLab gives protected variables only to protected branches'\n# pipelines, and a merge request's runs on its source branch — give a preview read-only\n# credentials).\n"
        ),
    });
    if let Some(setup) = &super::pipeline::setup_line(pipeline) {
        out.push_str(&format!(
            "\ndefault:\n  before_script:\n    - {}\n",
            quoted(setup)
        ));
    }
    out.push_str(&format!(
        "\nmara-open:\n  stage: mara-open\n{}  script:\n    - {}\n",
        when(pipeline, false),
        quoted(&open_command(pipeline))
    ));
    for j in &pipeline.jobs {
        out.push_str(&project_job(pipeline, j));
    }
    out.push_str(&close_job(pipeline));
    out
}

/// When a job runs: `always` (after a failure too), and for a merge request's preview only in
/// merge-request pipelines, or in a child pipeline whose parent's trigger job decides — as each
/// job's rule, not `workflow:`, which would rule the whole pipeline a file is included in.
fn when(pipeline: &Pipeline, always: bool) -> String {
    // The pipelines it runs in: a merge request's, a scheduled one, or a child pipeline whose
    // parent's trigger job decides.
    let mut sources = Vec::new();
    if pipeline.on == Some(CiTrigger::PullRequest) {
        sources.push("merge_request_event");
    }
    if pipeline.schedule.is_some() {
        sources.push("schedule");
    }
    if sources.is_empty() {
        return match always {
            true => "  when: always\n".into(),
            false => String::new(),
        };
    }
    sources.push("parent_pipeline");
    let rule: Vec<String> = (sources.iter())
        .map(|s| format!("$CI_PIPELINE_SOURCE == \"{s}\""))
        .collect();
    let when = match always {
        true => "      when: always\n",
        false => "",
    };
    format!("  rules:\n    - if: {}\n{when}", rule.join(" || "))
}

/// A project's job. It runs even after a failure: mara skips a project whose dependency did not
/// succeed, recording why, and ends at once in a cancelled run; so each job ends, and the close
/// job after them records the run as it went. A job that skipped its project exits 7, which
/// GitLab shows as a warning, not as a success (docs/commands.md, "ci"). GitLab gives every job
/// every CI/CD variable: the job unsets the secrets that are not its own before anything runs —
/// its own setup included, which then comes after.
fn project_job(pipeline: &Pipeline, j: &Job) -> String {
    let unset = unset(&pipeline.withheld(j));
    let first = match (&super::pipeline::setup_line(pipeline), unset.is_empty()) {
        (Some(setup), false) => format!("  before_script:\n{unset}    - {}\n", quoted(setup)),
        _ => String::new(),
    };
    let unset = match first.is_empty() {
        true => unset,
        false => String::new(),
    };
    format!(
        "\n{}:\n  stage: mara-projects\n  needs: [{}]\n{}  allow_failure:\n    exit_codes: [7]\n{first}  script:\n{unset}    - {}\n",
        j.id,
        j.needs.join(", "),
        when(pipeline, true),
        quoted(&project_command(pipeline, &j.path))
    )
}

/// The close job: no secret but the ledger's URL — not the run's secrets, not the engines'
/// credentials (`--env`), which it unsets before its own setup (a `before_script` of its own:
/// the default's would run the setup first, with every secret); its reports as artifacts, a
/// preview's summary exposed on its merge request.
fn close_job(pipeline: &Pipeline) -> String {
    let mut withheld: Vec<String> = pipeline.secrets.iter().cloned().collect();
    withheld.extend(pipeline.env.iter().cloned());
    let unset = unset(&withheld);
    let (before, unset) = match &super::pipeline::setup_line(pipeline) {
        Some(setup) => (
            format!("  before_script:\n{unset}    - {}\n", quoted(setup)),
            String::new(),
        ),
        None => (String::new(), unset),
    };
    let (paths, exposed) = match pipeline.operation {
        CiOperation::Preview => (
            format!("mara-report.json, {PREVIEW_FILE}"),
            "    expose_as: \"mara preview\"\n",
        ),
        _ => ("mara-report.json".to_string(), ""),
    };
    format!(
        "\nmara-close:\n  stage: mara-close\n{}{before}  script:\n{unset}    - {}\n  artifacts:\n    when: always\n{exposed}    paths: [{paths}]\n    reports:\n      junit: mara-junit.xml\n",
        when(pipeline, true),
        quoted(&close_command(
            pipeline,
            " --report mara-report.json --junit mara-junit.xml"
        ))
    )
}

/// The script line that unsets `names`, if any.
fn unset(names: &[String]) -> String {
    match names.is_empty() {
        true => String::new(),
        false => format!("    - {}\n", quoted(&format!("unset {}", names.join(" ")))),
    }
}
