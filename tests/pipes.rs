//! A closed pipe ends output, not the run (docs/decisions.md, "A closed pipe ends output, not
//! the run"): `mara up --yes --output json 2>&1 >/dev/null | head -3` once panicked (exit 101)
//! and left a finished deploy recorded `abandoned`. Each command here runs with one of its
//! streams a pipe whose reader is already gone, under each output format.

mod common;

use std::process::{Command, Stdio};

use common::Deployment;
use serde_json::Value;

#[derive(Clone, Copy, Debug)]
enum Stream {
    Stdout,
    Stderr,
}

/// `mara <args>` in `d` with `closed` a pipe whose reading end is closed before mara starts,
/// the other stream captured: its exit code and what it wrote there.
fn with_closed(d: &Deployment, closed: Stream, args: &[&str]) -> (i32, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut command = Command::new(assert_cmd::cargo::cargo_bin("mara"));
    command
        .current_dir(d.root())
        .envs(d.environment())
        .env("NO_COLOR", "1")
        .env_remove("MARA_LEDGER_URL")
        .env_remove("CI")
        .args(args)
        .stdin(Stdio::null());
    match closed {
        Stream::Stdout => command.stdout(writer).stderr(Stdio::piped()),
        Stream::Stderr => command.stderr(writer).stdout(Stdio::piped()),
    };
    let output = command.output().unwrap();
    let said = match closed {
        Stream::Stdout => common::stderr(&output),
        Stream::Stderr => common::stdout(&output),
    };
    (output.status.code().unwrap_or(-1), said)
}

/// The stack's last run, as the ledger has it.
fn last_run(d: &Deployment) -> Value {
    let output = d
        .mara()
        .args(["--output", "json", "history"])
        .output()
        .unwrap();
    let runs: Value = serde_json::from_slice(&output.stdout).unwrap();
    runs[0].clone()
}

#[test]
fn a_run_whose_reader_is_gone_ends_as_it_would_and_is_recorded_so() {
    let d = Deployment::of("mara-local");
    for (stream, format) in [
        (Stream::Stderr, "json"),
        (Stream::Stdout, "json"),
        (Stream::Stderr, "human"),
        (Stream::Stdout, "human"),
    ] {
        for operation in ["up", "preview"] {
            let mut args = vec!["--output", format, operation];
            if operation == "up" {
                args.push("--yes");
            }
            let (code, said) = with_closed(&d, stream, &args);
            let case = format!("{operation} --output {format}, {stream:?} closed");
            assert!(!said.contains("panicked"), "{case}: {said}");
            assert_eq!(code, 0, "{case}: {said}");
            if format == "json" && matches!(stream, Stream::Stderr) {
                let report: Value = serde_json::from_str(&said).unwrap();
                assert_eq!(report["status"], "succeeded", "{case}: {report:#}");
            }
            // A preview is not recorded; an up is, as it ended.
            if operation == "up" {
                let run = last_run(&d);
                assert_eq!(run["operation"], operation, "{case}: {run:#}");
                assert_eq!(run["status"], "succeeded", "{case}: {run:#}");
            }
        }
    }
}

#[test]
fn reading_commands_end_quietly_when_their_reader_is_gone() {
    let d = Deployment::of("mara-local");
    let output = d.mara().args(["up", "--yes"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let reads: [&[&str]; 7] = [
        &["history"],
        &["logs"],
        &["logs", "--follow"],
        &["show-execution"],
        &["show-execution", "--format", "list"],
        &["show-execution", "--format", "mermaid"],
        &["status"],
    ];
    for stream in [Stream::Stdout, Stream::Stderr] {
        for format in ["human", "json"] {
            for read in reads {
                let args = [&["--output", format][..], read].concat();
                let (code, said) = with_closed(&d, stream, &args);
                let case = format!("{args:?}, {stream:?} closed");
                assert!(!said.contains("panicked"), "{case}: {said}");
                assert_eq!(code, 0, "{case}: {said}");
            }
        }
    }
}
