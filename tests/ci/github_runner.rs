//! A GitHub workflow's jobs run as GitHub runs them, as far as mara's workflows need: each job on
//! a runner of its own (a fresh clone of the repository) once the jobs it `needs:` succeeded, or
//! under `if: ${{ always() }}` whatever they did; each `run:` step in a new shell — `bash -e
//! FILE`, or under `shell: bash` GitHub's `bash --noprofile --norc -eo pipefail FILE` — with the
//! workflow's, the job's and the step's `env:`, and what the steps before it wrote to
//! `$GITHUB_PATH` (directories put first on its PATH) and `$GITHUB_ENV` (`NAME=VALUE`, or
//! `NAME<<DELIMITER` lines); `${{ secrets.X }}`, `${{ vars.X }}` and the run's ids replaced
//! (an expression it does not know fails the test). A step that fails ends its job.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// How a job ended, and what its steps printed.
pub struct Ran {
    pub id: String,
    /// `None`: skipped, a job it needs did not succeed.
    pub code: Option<i32>,
    pub output: String,
}

pub struct Runner {
    /// Where the jobs' clones are (`DIR/jobs/JOB`), and their temporary directories.
    pub dir: PathBuf,
    /// The repository the checkout step clones.
    pub repository: PathBuf,
    /// The runner's own variables (PATH, HOME, …); nothing else of the test's reaches a step.
    pub base: BTreeMap<String, String>,
    /// The repository's secrets.
    pub secrets: BTreeMap<String, String>,
    pub run_id: u64,
}

impl Runner {
    /// Every job of `workflow` (its text), in the file's order, which must follow `needs:`.
    pub fn run(&self, workflow: &str) -> Vec<Ran> {
        let workflow: Value = serde_saphyr::from_str(workflow).unwrap();
        let top_env = self.env_of(&workflow["env"]);
        let mut ran: Vec<Ran> = Vec::new();
        for (id, job) in workflow["jobs"].as_object().unwrap() {
            let needs: Vec<&str> = (job["needs"].as_array().into_iter().flatten())
                .map(|n| n.as_str().unwrap())
                .collect();
            let succeeded = needs.iter().all(|n| {
                let before = ran.iter().find(|r| r.id == *n);
                before
                    .unwrap_or_else(|| panic!("{id} needs {n}, which has not run"))
                    .code
                    == Some(0)
            });
            let always = job["if"].as_str() == Some("${{ always() }}");
            if !succeeded && !always {
                ran.push(Ran {
                    id: id.clone(),
                    code: None,
                    output: String::new(),
                });
                continue;
            }
            let mut env = top_env.clone();
            env.extend(self.env_of(&job["env"]));
            ran.push(self.job(id, job, env));
        }
        ran
    }

    /// One job on a fresh runner.
    fn job(&self, id: &str, job: &Value, mut env: BTreeMap<String, String>) -> Ran {
        let workspace = self.dir.join("jobs").join(id);
        let temp = self.dir.join("temp").join(id);
        std::fs::create_dir_all(&temp).unwrap();
        let mut prepended: Vec<String> = Vec::new();
        let mut output = String::new();
        for (n, step) in job["steps"].as_array().unwrap().iter().enumerate() {
            if let Some(uses) = step["uses"].as_str() {
                assert!(uses.starts_with("actions/checkout@"), "{id}: {uses}");
                let status = Command::new("git")
                    .args(["clone", "-q"])
                    .arg(&self.repository)
                    .arg(&workspace)
                    .status()
                    .unwrap();
                assert!(status.success(), "{id}: the checkout");
                continue;
            }
            let run = step["run"]
                .as_str()
                .unwrap_or_else(|| panic!("{id}: {step}"));
            let script = temp.join(format!("step-{n}.sh"));
            std::fs::write(&script, run).unwrap();
            let (path_file, env_file) = (
                temp.join(format!("path-{n}")),
                temp.join(format!("env-{n}")),
            );
            std::fs::write(&path_file, "").unwrap();
            std::fs::write(&env_file, "").unwrap();
            let mut command = Command::new("bash");
            match step["shell"].as_str() {
                Some("bash") => command.args(["--noprofile", "--norc", "-eo", "pipefail"]),
                None => command.arg("-e"),
                Some(other) => panic!("{id}: shell {other}"),
            };
            let mut vars = self.base.clone();
            vars.extend(env.clone());
            vars.extend(self.env_of(&step["env"]));
            let path = (prepended.iter().rev())
                .chain([&self.base["PATH"]])
                .cloned()
                .collect::<Vec<_>>()
                .join(":");
            vars.insert("PATH".into(), path);
            for (name, value) in [
                ("GITHUB_JOB", id.to_string()),
                ("GITHUB_WORKSPACE", workspace.display().to_string()),
                ("GITHUB_PATH", path_file.display().to_string()),
                ("GITHUB_ENV", env_file.display().to_string()),
                ("GITHUB_RUN_ID", self.run_id.to_string()),
                ("GITHUB_RUN_ATTEMPT", "1".into()),
                (
                    "GITHUB_STEP_SUMMARY",
                    temp.join("summary.md").display().to_string(),
                ),
                ("RUNNER_TEMP", temp.display().to_string()),
            ] {
                vars.insert(name.into(), value);
            }
            let done = command
                .arg(&script)
                .current_dir(&workspace)
                .env_clear()
                .envs(&vars)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            output.push_str(&String::from_utf8_lossy(&done.stdout));
            output.push_str(&String::from_utf8_lossy(&done.stderr));
            let code = done.status.code().unwrap_or(-1);
            if code != 0 {
                return Ran {
                    id: id.into(),
                    code: Some(code),
                    output,
                };
            }
            let written = std::fs::read_to_string(&path_file).unwrap();
            prepended.extend(written.lines().filter(|l| !l.is_empty()).map(String::from));
            env.extend(env_lines(&std::fs::read_to_string(&env_file).unwrap()));
        }
        Ran {
            id: id.into(),
            code: Some(0),
            output,
        }
    }

    /// An `env:` map with its expressions replaced.
    fn env_of(&self, env: &Value) -> BTreeMap<String, String> {
        (env.as_object().into_iter().flatten())
            .map(|(k, v)| (k.clone(), self.expand(v.as_str().unwrap())))
            .collect()
    }

    /// `text` with each `${{ … }}` replaced by its value.
    fn expand(&self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${{") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find("}}").unwrap() + start;
            let expression = rest[start + 3..end].trim();
            out.push_str(&match expression.split_once('.') {
                Some(("secrets", name)) => self.secrets.get(name).cloned().unwrap_or_default(),
                Some(("vars", _)) => String::new(),
                Some(("github", "run_id")) => self.run_id.to_string(),
                Some(("github", "run_attempt")) => "1".into(),
                _ => panic!("an expression this runner does not know: {expression}"),
            });
            rest = &rest[end + 2..];
        }
        out.push_str(rest);
        out
    }
}

/// A `$GITHUB_ENV` file's variables: `NAME=VALUE` lines, and `NAME<<DELIMITER` followed by the
/// value's lines up to the delimiter's.
fn env_lines(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some((name, delimiter)) = line.split_once("<<").filter(|(n, _)| !n.contains('=')) {
            let value: Vec<&str> = lines.by_ref().take_while(|l| *l != delimiter).collect();
            found.push((name.to_string(), value.join("\n")));
        } else if let Some((name, value)) = line.split_once('=') {
            found.push((name.to_string(), value.to_string()));
        }
    }
    found
}

/// The directories of `path` that hold no `mara`: a runner where only the setup puts it.
pub fn path_without_mara(path: &str) -> String {
    (path.split(':'))
        .filter(|dir| !dir.is_empty() && !Path::new(dir).join("mara").exists())
        .collect::<Vec<_>>()
        .join(":")
}
