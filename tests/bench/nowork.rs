//! A `pulumi` that does no work, for the benchmarks (tests/bench/run.sh): it answers each call mara
//! makes at once with valid output (a preview, a digest of one bucket created and the stack the
//! same), sleeps `NOWORK_SLEEP` seconds in `up`/`refresh`/`destroy` and
//! `NOWORK_CALL_SLEEP` seconds in every call (what a real CLI's start-up and backend cost), and
//! appends its arguments to `NOWORK_LOG` when that is set. Compiled rather than a shell script so
//! that its own start-up (one process, no `sleep` child) disturbs the measurements as little as
//! possible. Built by run.sh with `rustc -O`; not part of the crate.

use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(seconds) = std::env::var("NOWORK_CALL_SLEEP")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
    }
    if let Ok(log) = std::env::var("NOWORK_LOG") {
        if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
            let _ = writeln!(file, "{}", args.join(" "));
        }
    }
    for word in &args {
        match word.as_str() {
            "output" => {
                println!("{{}}");
                return;
            }
            "preview" => {
                println!(
                    r#"{{"steps":[{{"op":"same","urn":"urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev"}},{{"op":"create","urn":"urn:pulumi:dev::p::aws:s3/bucket:Bucket::logs","newState":{{"type":"aws:s3/bucket:Bucket","inputs":{{"bucket":"logs","tags":{{"owner":"platform"}}}}}}}}],"changeSummary":{{"same":1,"create":1}}}}"#
                );
                return;
            }
            "up" | "refresh" | "destroy" => {
                let seconds: f64 = std::env::var("NOWORK_SLEEP")
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0.0);
                std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
                println!(
                    r#"{{"sequence":0,"timestamp":0,"summaryEvent":{{"resourceChanges":{{"same":1}},"durationSeconds":0,"result":"succeeded"}}}}"#
                );
                return;
            }
            _ => {}
        }
    }
}
