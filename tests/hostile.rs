//! The hostile-input corpus (issue 12, "Keep it found"): one case per class of bad input the
//! fuzz and fault sweep tried, each on a copy of the example workspace. Every case asserts the
//! exit code, that the message names the file (and the line where a file has lines), and what it
//! must never say: a secret, the parser library's advice, a panic. All cases run and report
//! together.

mod common;

use std::path::Path;
use std::time::Duration;

use common::Deployment;

/// One hostile input.
struct Case {
    name: &'static str,
    /// Makes the workspace hostile.
    setup: fn(&Path),
    /// The command, run in the workspace.
    args: &'static [&'static str],
    code: i32,
    /// What the output must say (the file and line, the reason).
    says: &'static [&'static str],
    /// What it must never say.
    never: &'static [&'static str],
}

const ENV: &str = "config/pulumi/environment";
const STACK: &str = "config/pulumi/Pulumi.dev.yaml";

fn append(root: &Path, file: &str, text: &[u8]) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(root.join(file))
        .unwrap()
        .write_all(text)
        .unwrap();
}

fn replace(root: &Path, file: &str, text: &[u8]) {
    let path = root.join(file);
    let _ = std::fs::remove_file(&path);
    std::fs::write(path, text).unwrap();
}

/// The example's environment file has 16 lines: an appended line is line 17.
const CASES: &[Case] = &[
    Case {
        name: "a NUL byte in an environment value",
        setup: |root| append(root, ENV, b"BAD=a\0b\n"),
        args: &["up", "--yes"],
        code: 3,
        says: &["config/pulumi/environment:17", "NUL byte"],
        never: &[],
    },
    Case {
        name: "an environment value past what a process can receive",
        setup: |root| {
            append(
                root,
                ENV,
                format!("BIG={}\n", "x".repeat(200_000)).as_bytes(),
            )
        },
        args: &["validate"],
        code: 3,
        says: &["config/pulumi/environment:17", "128 KiB"],
        never: &["xxxxxxxx"],
    },
    Case {
        name: "a secret written YAML-style in the environment file",
        setup: |root| append(root, ENV, b"MARA_SECRET_FOO: Zq7-hostile-secret\n"),
        args: &["up", "--yes"],
        code: 3,
        says: &["config/pulumi/environment:17", "`MARA_SECRET_FOO:`"],
        never: &["Zq7-hostile-secret"],
    },
    Case {
        name: "bytes that are not UTF-8",
        setup: |root| append(root, ENV, b"A=caf\xe9\n"),
        args: &["validate"],
        code: 3,
        says: &["config/pulumi/environment:17", "column 6"],
        never: &[],
    },
    Case {
        name: "a lone carriage return ending a line",
        setup: |root| append(root, ENV, b"A=1\rB=2\n"),
        args: &["up", "--yes"],
        code: 3,
        says: &["config/pulumi/environment:17"],
        never: &[],
    },
    Case {
        name: "a byte-order mark is read past",
        setup: |root| {
            let text = std::fs::read(root.join(ENV)).unwrap();
            replace(root, ENV, &[b"\xef\xbb\xbf".as_slice(), &text].concat());
        },
        args: &["show-execution"],
        code: 0,
        says: &["14 projects"],
        never: &[],
    },
    Case {
        name: "a FIFO where the environment file belongs",
        setup: |root| {
            let path = root.join(ENV);
            std::fs::remove_file(&path).unwrap();
            let status = std::process::Command::new("mkfifo").arg(&path).status();
            assert!(status.unwrap().success());
        },
        args: &["up", "--yes"],
        code: 3,
        says: &["config/pulumi/environment", "not a regular file"],
        never: &[],
    },
    Case {
        name: "a FIFO where a project's .gitignore belongs",
        setup: |root| fifo(root, "kubernetes/logstore/.gitignore"),
        args: &["up", "--yes"],
        code: 3,
        // Named as the workspace's other files are.
        says: &["error: kubernetes/logstore/.gitignore: it is not a regular file"],
        never: &[],
    },
    Case {
        name: "a FIFO where a project's .gitignore belongs, for --changed",
        setup: |root| fifo(root, "kubernetes/logstore/.gitignore"),
        args: &["show-execution", "--changed"],
        code: 3,
        says: &["error: kubernetes/logstore/.gitignore: it is not a regular file"],
        never: &[],
    },
    Case {
        name: "a FIFO where a project's .gitignore belongs, for validate",
        setup: |root| fifo(root, "kubernetes/logstore/.gitignore"),
        args: &["validate"],
        code: 3,
        says: &["kubernetes/logstore/.gitignore", "where an ignore file"],
        never: &[],
    },
    Case {
        name: "a FIFO where a project's Pulumi.yaml belongs",
        setup: |root| fifo(root, "kubernetes/logstore/Pulumi.yaml"),
        args: &["validate"],
        code: 3,
        says: &["kubernetes/logstore/Pulumi.yaml", "not a regular file"],
        never: &["no Pulumi.yaml"],
    },
    Case {
        name: "a FIFO where a project's Pulumi.yaml belongs, for up",
        setup: |root| fifo(root, "kubernetes/logstore/Pulumi.yaml"),
        args: &["up", "--yes"],
        code: 3,
        says: &["kubernetes/logstore/Pulumi.yaml", "not a regular file"],
        never: &["no Pulumi.yaml"],
    },
    Case {
        name: "a FIFO where the workspace's .ignore belongs, for --changed",
        setup: |root| fifo(root, ".ignore"),
        args: &["show-execution", "--changed"],
        code: 3,
        says: &[".ignore", "where an ignore file"],
        never: &[],
    },
    Case {
        name: "a FIFO where .git/info/exclude belongs",
        setup: |root| {
            std::fs::create_dir_all(root.join(".git/info")).unwrap();
            fifo(root, ".git/info/exclude");
        },
        args: &["up", "--yes"],
        code: 3,
        says: &[".git/info/exclude"],
        never: &[],
    },
    Case {
        name: "a FIFO where a provider's file belongs",
        setup: |root| fifo(root, "providers/mine.toml"),
        args: &["show-execution"],
        code: 3,
        says: &[
            "providers/mine.toml",
            "not a regular file",
            "where a provider's file belongs",
        ],
        never: &["no provider named"],
    },
    Case {
        name: "a directory where a provider's file belongs",
        setup: |root| std::fs::create_dir_all(root.join("providers/mine.toml")).unwrap(),
        args: &["show-execution", "--provider", "mine"],
        code: 3,
        says: &["providers/mine.toml", "it is a directory"],
        never: &["no provider named"],
    },
    Case {
        name: "a symlink to /dev/zero as the environment file",
        setup: |root| {
            let path = root.join(ENV);
            std::fs::remove_file(&path).unwrap();
            std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        },
        args: &["validate"],
        code: 3,
        says: &["config/pulumi/environment", "not a regular file"],
        never: &[],
    },
    Case {
        name: "an input past the size limit",
        setup: |root| {
            let file = std::fs::File::create(root.join(STACK)).unwrap();
            file.set_len(17 * 1024 * 1024).unwrap();
        },
        args: &["validate"],
        code: 3,
        says: &["config/pulumi/Pulumi.dev.yaml", "MiB"],
        never: &[],
    },
    Case {
        name: "mara.toml as a directory",
        setup: |root| {
            std::fs::remove_file(root.join("mara.toml")).unwrap();
            std::fs::create_dir(root.join("mara.toml")).unwrap();
        },
        args: &["show-execution"],
        code: 3,
        says: &["mara.toml", "directory"],
        never: &[],
    },
    Case {
        name: "a key twice in the stack configuration",
        setup: |root| append(root, STACK, b"  local-cluster:node_count: 4\n"),
        args: &["up", "--yes"],
        code: 3,
        says: &["config/pulumi/Pulumi.dev.yaml:", "appears twice"],
        never: &["DuplicateKeyPolicy", "Options"],
    },
    Case {
        name: "a YAML bomb",
        setup: |root| {
            let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
            for i in 1..9 {
                let p = i - 1;
                text.push_str(&format!(
                    "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
                ));
            }
            text.push_str("config:\n  local-cluster:node_count: *a8\n");
            replace(root, STACK, text.as_bytes());
        },
        args: &["validate"],
        code: 3,
        says: &["config/pulumi/Pulumi.dev.yaml", "too large or too complex"],
        never: &["budget", "Options"],
    },
    Case {
        name: "nesting past any reason",
        setup: |root| {
            let text = format!("config:\n  a:b: {}\n", "[".repeat(20_000));
            replace(root, STACK, text.as_bytes());
        },
        args: &["validate"],
        code: 3,
        says: &["config/pulumi/Pulumi.dev.yaml:2"],
        never: &["overflow"],
    },
    Case {
        name: "a list where kubernetes:infra_type is text",
        setup: |root| {
            let text = "config:\n  kubernetes:infra_type:\n    - local\n    - aws\n";
            replace(root, STACK, text.as_bytes());
        },
        args: &["up", "--yes"],
        code: 3,
        says: &["config/pulumi/Pulumi.dev.yaml:2", "kubernetes:infra_type"],
        never: &[],
    },
    Case {
        name: "a cycle in a provider",
        setup: |root| {
            let text = "description = \"cycle\"\n[[project]]\npath = \"a\"\nafter = [\"b\"]\n\
                        [[project]]\npath = \"b\"\nafter = [\"a\"]\n";
            replace(root, "providers/cycle.toml", text.as_bytes());
        },
        args: &["show-execution", "--provider", "cycle"],
        code: 3,
        says: &["providers/cycle.toml:", "a -> b -> a"],
        never: &[],
    },
    Case {
        name: "a provider of 50,000 projects is planned, not refused",
        setup: |root| {
            let mut text = String::from("description = \"huge\"\n");
            for i in 0..50_000 {
                text.push_str(&format!("[[project]]\npath = \"p{i}\"\n"));
            }
            replace(root, "providers/huge.toml", text.as_bytes());
        },
        args: &["show-execution", "--provider", "huge", "--format", "json"],
        code: 0,
        says: &["\"p49999\""],
        never: &[],
    },
    Case {
        name: "a path twice in a provider that extends another",
        setup: |root| {
            let text = "description = \"twice\"\nextends = \"local\"\n\
                        [[project]]\npath = \"extra\"\n[[project]]\npath = \"extra\"\n";
            replace(root, "providers/twice.toml", text.as_bytes());
        },
        args: &["show-execution", "--provider", "twice"],
        code: 3,
        says: &["providers/twice.toml:6"],
        never: &[],
    },
    Case {
        name: "a configuration value no Terraform module can receive",
        setup: |root| {
            append(
                root,
                "providers/local.toml",
                b"\n[[project]]\npath = \"tfmod\"\nengine = \"terraform\"\n",
            );
            std::fs::create_dir_all(root.join("tfmod")).unwrap();
            std::fs::write(root.join("tfmod/main.tf"), "variable \"name\" {}\n").unwrap();
            append(root, STACK, b"  tfmod:name: \"a\\0b\"\n");
        },
        args: &["up", "--yes"],
        code: 3,
        says: &[
            "config/pulumi/Pulumi.dev.yaml:",
            "`tfmod:name`",
            "NUL byte",
            "TF_VAR_name",
        ],
        never: &[],
    },
    Case {
        name: "the stack name `..`",
        setup: |_| {},
        args: &["up", "--yes", "--stack", ".."],
        code: 2,
        says: &["`..`"],
        never: &[],
    },
    Case {
        name: "projects_dir leading outside the workspace through a symlink",
        setup: |root| {
            std::os::unix::fs::symlink("/tmp", root.join("outside")).unwrap();
            append(root, "mara.toml", b"projects_dir = \"outside\"\n");
        },
        args: &["show-execution"],
        code: 3,
        says: &["mara.toml:", "outside the workspace"],
        never: &[],
    },
];

#[test]
fn every_hostile_input_gets_a_clear_located_error() {
    let mut wrong = Vec::new();
    for case in CASES {
        let deployment = Deployment::of("mara-local");
        let root = deployment.root();
        (case.setup)(root);
        let output = deployment
            .mara()
            .args(case.args)
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap();
        let said = format!("{}{}", common::stdout(&output), common::stderr(&output));
        let mut faults = Vec::new();
        if output.status.code() != Some(case.code) {
            faults.push(format!(
                "exit {:?}, not {}",
                output.status.code(),
                case.code
            ));
        }
        for text in case.says {
            if !said.contains(text) {
                faults.push(format!("does not say {text:?}"));
            }
        }
        for text in case.never.iter().chain(&["panicked", "RUST_BACKTRACE"]) {
            if said.contains(text) {
                faults.push(format!("says {text:?}"));
            }
        }
        if !case.args.contains(&"show-execution") && !case.args.contains(&"validate") {
            // Nothing ran: no engine was called.
            if !deployment.calls().is_empty() {
                faults.push("an engine was called".into());
            }
        }
        if !faults.is_empty() {
            let shown: String = said.chars().take(1500).collect();
            wrong.push(format!("{}: {}\n{shown}", case.name, faults.join("; ")));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n\n"));
}

/// A FIFO at `relative` (made in place of a file there).
fn fifo(root: &Path, relative: &str) {
    let path = root.join(relative);
    let _ = std::fs::remove_file(&path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let status = std::process::Command::new("mkfifo").arg(&path).status();
    assert!(status.unwrap().success(), "mkfifo {}", path.display());
}

#[test]
fn a_fifo_as_the_git_configuration_is_refused_not_waited_on() {
    let d = Deployment::of("mara-local");
    fifo(d.root(), "gitconfig");
    let started = std::time::Instant::now();
    let output = d
        .mara()
        .args(["show-execution", "--changed"])
        .env("GIT_CONFIG_GLOBAL", d.root().join("gitconfig"))
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains("gitconfig: it is not a regular file"),
        "{}",
        common::stderr(&output)
    );
}

/// A variable whose value is not UTF-8 (a shell passes any bytes) is left out, and said so: it
/// does not end mara, and the run goes on without it.
#[test]
fn a_variable_that_is_not_utf8_is_left_out_not_a_panic() {
    use std::os::unix::ffi::OsStrExt;
    let d = Deployment::of("mara-local");
    let output = d
        .mara()
        .args(["preview", "--only", "infrastructure/local/cluster"])
        .env("MARA_TRIAL_BYTES", std::ffi::OsStr::from_bytes(b"caf\xe9"))
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let said = common::stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(
        said.contains("warning: the environment variable MARA_TRIAL_BYTES is not UTF-8"),
        "{said}"
    );
    assert!(!said.contains("panicked"), "{said}");
    assert!(!d.calls().is_empty(), "the preview ran");
}
