//! A fanned-out run as a GitLab CI pipeline.

use super::pipeline::{
    PREVIEW_FILE, Pipeline, close_command, header, open_command, project_command, quoted,
};
use crate::cli::{CiOperation, CiTrigger};

pub(super) fn gitlab(pipeline: &Pipeline) -> String {
    let mut out = header(pipeline);
    // A merge request's preview: GitLab's merge-request pipelines only, or a child pipeline
    // whose parent's trigger job decides when (two of mara's files cannot be included in one
    // pipeline: their jobs have the same names).
    if pipeline.on == Some(CiTrigger::PullRequest) {
        out.push_str(
            "\nworkflow:\n  rules:\n    - if: $CI_PIPELINE_SOURCE == \"merge_request_event\" || $CI_PIPELINE_SOURCE == \"parent_pipeline\"\n",
        );
    }
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
    out.push_str(&format!(
        "# MARA_LEDGER_URL{} are the project's CI/CD variables (protected; masked where GitLab\n# can mask them).\n",
        names.iter().map(|n| format!(", {n}")).collect::<String>()
    ));
    if let Some(setup) = &pipeline.setup {
        out.push_str(&format!(
            "\ndefault:\n  before_script:\n    - {}\n",
            quoted(setup)
        ));
    }
    out.push_str(&format!(
        "\nmara-open:\n  stage: mara-open\n  script:\n    - {}\n",
        quoted(&open_command(pipeline))
    ));
    // Every project job runs, even after a failure: mara skips a project whose dependency did not
    // succeed, recording why, and ends at once in a cancelled run; so each job ends, and the
    // close job after them records the run as it went. A job that skipped its project exits 7,
    // which GitLab shows as a warning, not as a success (docs/commands.md, "ci").
    // GitLab gives every job every CI/CD variable: a project's job unsets the secrets that are
    // not its own before anything runs — its own setup included, which then comes after.
    for j in &pipeline.jobs {
        let withheld = pipeline.withheld(j);
        let unset = match withheld.is_empty() {
            true => String::new(),
            false => format!(
                "    - {}\n",
                quoted(&format!("unset {}", withheld.join(" ")))
            ),
        };
        let first = match (&pipeline.setup, unset.is_empty()) {
            (Some(setup), false) => format!("  before_script:\n{unset}    - {}\n", quoted(setup)),
            _ => String::new(),
        };
        let unset = if first.is_empty() {
            unset
        } else {
            String::new()
        };
        out.push_str(&format!(
            "\n{}:\n  stage: mara-projects\n  needs: [{}]\n  when: always\n  allow_failure:\n    exit_codes: [7]\n{first}  script:\n{unset}    - {}\n",
            j.id,
            j.needs.join(", "),
            quoted(&project_command(pipeline, &j.path))
        ));
    }
    let withheld: Vec<&str> = pipeline.secrets.iter().map(String::as_str).collect();
    let unset = match withheld.is_empty() {
        true => String::new(),
        false => format!(
            "    - {}\n",
            quoted(&format!("unset {}", withheld.join(" ")))
        ),
    };
    // A preview's summary is shown on its merge request, as an exposed artifact.
    let (paths, exposed) = match pipeline.operation {
        CiOperation::Preview => (
            format!("mara-report.json, {PREVIEW_FILE}"),
            "    expose_as: \"mara preview\"\n",
        ),
        _ => ("mara-report.json".to_string(), ""),
    };
    out.push_str(&format!(
        "\nmara-close:\n  stage: mara-close\n  when: always\n  script:\n{unset}    - {}\n  artifacts:\n    when: always\n{exposed}    paths: [{paths}]\n    reports:\n      junit: mara-junit.xml\n",
        quoted(&close_command(pipeline, " --report mara-report.json --junit mara-junit.xml"))
    ));
    out
}
