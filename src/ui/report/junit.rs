//! The JUnit XML report (`--junit FILE`) for CI systems: one test case per project, a failure
//! for each that failed (or drifted, or would change where no change was expected), a skip with
//! its reason for each that did not run. quick-junit writes the XML.

use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::{RunSummary, drift_summary};
use crate::engine::{Operation, changes_summary};
use crate::run::events::ProjectReport;
use crate::status::ProjectStatus;

/// A JUnit XML report: one test suite, the run; one test case per project.
pub fn junit(summary: &RunSummary) -> String {
    let mut suite = TestSuite::new(format!(
        "mara {} {} ({})",
        summary.operation, summary.stack, summary.provider
    ));
    // A run's start is RFC 3339 (`clock::rfc3339`); a summary without one has no timestamp.
    if let Ok(started) = chrono::DateTime::parse_from_rfc3339(&summary.started) {
        suite.set_timestamp(started);
    }
    suite.set_time(summary.duration);
    suite.add_test_cases(summary.projects.iter().map(|p| test_case(summary, p)));
    let mut report = Report::new("mara");
    report.set_time(summary.duration).add_test_suite(suite);
    report
        .to_string()
        .expect("a report written to memory serializes")
}

/// A project's test case: a failure, a skip with its reason, or what it did.
fn test_case(summary: &RunSummary, project: &ProjectReport) -> TestCase {
    // quick-junit drops a tab with the other control characters: a space keeps the words apart.
    let reason = (project.reason.as_deref())
        .map_or_else(|| project.status.to_string(), |r| r.replace('\t', " "));
    let changes = project.changes.as_ref().map(changes_summary);
    let (status, out) = match project.status {
        _ if drifted(summary, project) => {
            let message = match summary.operation {
                Operation::Drift => format!("drifted: {}", drift_summary(project)),
                _ => format!(
                    "would change, where no change was expected: {}",
                    changes.unwrap_or(reason)
                ),
            };
            (failure(&message), None)
        }
        ProjectStatus::Failed => (failure(&reason), None),
        ProjectStatus::Skipped | ProjectStatus::Cancelled | ProjectStatus::Waiting => {
            let mut skipped = TestCaseStatus::skipped();
            skipped.set_message(reason);
            (skipped, None)
        }
        _ => {
            let out = format!("{}: {}", project.status, changes.unwrap_or_default());
            (TestCaseStatus::success(), Some(out))
        }
    };
    let mut case = TestCase::new(project.path.as_str(), status);
    case.set_classname(format!("mara.{}.{}", summary.provider, summary.operation))
        .set_time(Duration::from_millis(project.duration_ms.unwrap_or(0)));
    if let Some(out) = out {
        case.set_system_out(out);
    }
    case
}

/// A failure whose message is also its text: a reader may show either.
fn failure(message: &str) -> TestCaseStatus {
    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
    status.set_message(message).set_description(message);
    status
}

/// Whether a drift check (`mara drift`, `preview --expect-no-changes`) fails `p`: it drifted, or
/// would change.
fn drifted(summary: &RunSummary, p: &ProjectReport) -> bool {
    let changes = p.changes.as_ref().is_some_and(crate::engine::has_changes);
    match summary.operation {
        Operation::Drift => p.status != ProjectStatus::Failed && (changes || !p.drifted.is_empty()),
        _ => {
            summary.expect_no_changes
                && p.status != ProjectStatus::Failed
                && (p.status == ProjectStatus::Waiting || changes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::events::{Finished, Outcome};
    use crate::status::RunStatus;

    fn project(path: &str, outcome: Outcome, changes: &[(&str, u64)]) -> ProjectReport {
        let changes = (!changes.is_empty())
            .then(|| changes.iter().map(|(op, n)| (op.to_string(), *n)).collect());
        let mut p = ProjectReport::new(
            path.into(),
            None,
            Finished {
                changes,
                ..Finished::without_running(outcome)
            },
        );
        p.duration_ms = Some(1500);
        p
    }

    fn summary(operation: Operation, projects: Vec<ProjectReport>) -> RunSummary {
        RunSummary {
            run_id: "r1".into(),
            operation,
            provider: "aws".into(),
            stack: "dev".into(),
            status: RunStatus::Failed,
            started: "2026-11-21T17:08:56.123Z".into(),
            finished: String::new(),
            projects,
            duration: std::time::Duration::from_millis(2250),
            logs: None,
            expect_no_changes: false,
            exit_code: None,
            policy: None,
        }
    }

    /// A run of each kind of project: succeeded, unchanged, failed (its reason with what XML
    /// escapes, a tab, a terminal's colours and a bell), skipped, cancelled, waiting.
    fn every_status(operation: Operation) -> RunSummary {
        let reason = "exit 1: <bad> & \"quoted\" 'x'\t\u{1b}[31mred\u{1b}[0m\u{7}";
        summary(
            operation,
            vec![
                project("infra/vpc", Outcome::Succeeded, &[("create", 2)]),
                project("infra/dns", Outcome::Unchanged, &[("same", 3)]),
                project(
                    "apps/api",
                    Outcome::Failed {
                        code: Some(1),
                        reason: reason.into(),
                    },
                    &[],
                ),
                project(
                    "apps/web",
                    Outcome::Skipped {
                        reason: "apps/api failed".into(),
                    },
                    &[],
                ),
                project("apps/jobs", Outcome::Cancelled { killed: None }, &[]),
                project(
                    "apps/cron",
                    Outcome::Waits {
                        on: vec!["infra/vpc".into()],
                        reason: "waits on infra/vpc".into(),
                    },
                    &[],
                ),
            ],
        )
    }

    /// The report as a JUnit reader reads it, and each test case as what it says: its name,
    /// class, time, and its failure, skip (their messages) or output. A failure's text is its
    /// message (read from the XML itself: the reader breaks a text at each entity).
    fn read(xml: &str) -> (junit_parser::TestSuites, Vec<(String, String, f64, String)>) {
        for failure in xml.split("<failure message=\"").skip(1) {
            let (message, text) = failure.split_once("\">").unwrap();
            assert_eq!(Some(message), text.split("</failure>").next(), "{xml}");
        }
        let suites = junit_parser::from_reader(std::io::Cursor::new(xml)).unwrap();
        let cases = (suites.suites[0].cases.iter())
            .map(|c| {
                let said = match &c.status {
                    junit_parser::TestStatus::Failure(f) => format!("failure: {}", f.message),
                    junit_parser::TestStatus::Skipped(s) => format!("skipped: {}", s.message),
                    junit_parser::TestStatus::Success => {
                        format!("out: {}", c.system_out.as_deref().unwrap_or_default())
                    }
                    junit_parser::TestStatus::Error(e) => format!("error: {}", e.message),
                };
                let class = c.classname.clone().unwrap_or_default();
                (c.original_name.clone(), class, c.time, said)
            })
            .collect();
        (suites, cases)
    }

    #[test]
    fn a_test_case_per_project_fails_or_skips_with_its_reason() {
        let xml = junit(&every_status(Operation::Up));
        let (suites, cases) = read(&xml);
        let counts = |s: &junit_parser::TestSuite| (s.tests, s.failures, s.skipped, s.errors);
        assert_eq!(suites.name, "mara");
        assert_eq!(
            (suites.tests, suites.failures, suites.skipped, suites.errors),
            (6, 1, 3, 0)
        );
        assert_eq!(suites.time, 2.25);
        let suite = &suites.suites[0];
        assert_eq!(suite.name, "mara up dev (aws)");
        assert_eq!(counts(suite), (6, 1, 3, 0));
        assert_eq!(suite.time, 2.25);
        assert_eq!(
            suite.timestamp.as_deref(),
            Some("2026-11-21T17:08:56.123+00:00")
        );
        let case = |name: &str, said: &str| {
            (
                name.to_string(),
                "mara.aws.up".to_string(),
                1.5,
                said.to_string(),
            )
        };
        assert_eq!(
            cases,
            [
                case("infra/vpc", "out: succeeded: +2"),
                case("infra/dns", "out: unchanged: no changes"),
                // Escaped as XML, without the terminal's colours or a bell; a tab is a space.
                case("apps/api", "failure: exit 1: <bad> & \"quoted\" 'x' red"),
                case("apps/web", "skipped: apps/api failed"),
                case("apps/jobs", "skipped: cancelled"),
                case("apps/cron", "skipped: waits on infra/vpc"),
            ]
        );
        assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"));
        assert!(xml.contains("exit 1: &lt;bad&gt; &amp; &quot;quoted&quot; &apos;x&apos; red"));
        assert!(!xml.contains(['\u{1b}', '\u{7}']), "{xml}");
    }

    #[test]
    fn a_drift_check_fails_what_drifted_or_would_change() {
        let mut drift = every_status(Operation::Drift);
        drift.projects[1].drifted = vec![crate::engine::ResourceDiff {
            op: "update".into(),
            resource: "aws:route53/record:Record (www)".into(),
            properties: vec![],
        }];
        let (suites, cases) = read(&junit(&drift));
        assert_eq!((suites.tests, suites.failures, suites.skipped), (6, 3, 3));
        let said: Vec<&str> = cases.iter().map(|c| c.3.as_str()).collect();
        assert_eq!(
            said[..2],
            [
                "failure: drifted: applying would change +2",
                "failure: drifted: 1 drifted",
            ]
        );
        // `preview --expect-no-changes`: a change, or a preview waiting on one, fails.
        let mut expect = every_status(Operation::Preview);
        expect.expect_no_changes = true;
        let (suites, cases) = read(&junit(&expect));
        assert_eq!((suites.tests, suites.failures, suites.skipped), (6, 3, 2));
        let failed: Vec<(&str, &str)> = (cases.iter())
            .filter(|c| c.3.starts_with("failure: would change"))
            .map(|c| (c.0.as_str(), c.3.as_str()))
            .collect();
        assert_eq!(
            failed,
            [
                (
                    "infra/vpc",
                    "failure: would change, where no change was expected: +2"
                ),
                (
                    "apps/cron",
                    "failure: would change, where no change was expected: waits on infra/vpc"
                ),
            ]
        );
    }
}
