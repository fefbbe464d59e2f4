//! The stand-in's DIY `postgres://` backend against a real PostgreSQL server of the test's own
//! (the main crate's `tests/common/postgres.rs`): the rows it keeps in the table, lib/pq's
//! connection rules (passwords, `sslmode`, TLS, the environment), locks, and stacks moved from a
//! file backend with `stack export` and `stack import`. Without PostgreSQL a test fails where
//! tools are required (`MARA_TEST_TOOLS=required`, CI), and is skipped, and said, elsewhere.

#[allow(dead_code)]
#[path = "../../common/tools.rs"]
mod tools;

#[allow(dead_code)]
#[path = "../../common/postgres.rs"]
mod postgres;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use postgres::Server;

/// Variables of lib/pq and Go's TLS that must not leak into a run from the test's environment.
const CONNECTION_VARS: [&str; 12] = [
    "PGPASSWORD",
    "PGUSER",
    "PGHOST",
    "PGPORT",
    "PGDATABASE",
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGOPTIONS",
    "PGAPPNAME",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "PULUMI_STAND_IN_LIBPQ",
];

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    /// Two projects: `proj-a` (config, a secret output) and `proj-b` (reads `proj-a`'s outputs).
    fn new() -> Scratch {
        let scratch = Scratch {
            dir: tempfile::tempdir().unwrap(),
        };
        scratch.project("a", "name: proj-a\nruntime: yaml\nconfig:\n  greeting:\n    type: string\n    default: hello\noutputs:\n  message: ${greeting} world\n  token: ${token}\nvariables:\n  token:\n    fn::secret: t0k3n-${pulumi.stack}\n");
        scratch.project("b", "name: proj-b\nruntime: yaml\nresources:\n  a:\n    type: pulumi:pulumi:StackReference\n    properties:\n      name: organization/proj-a/${pulumi.stack}\noutputs:\n  copied: ${a.outputs[\"message\"]}\n  token: ${a.outputs[\"token\"]}\n");
        scratch
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn project(&self, dir: &str, text: &str) {
        std::fs::create_dir_all(self.path().join(dir)).unwrap();
        std::fs::write(self.path().join(dir).join("Pulumi.yaml"), text).unwrap();
    }

    /// `pulumi args` in project `dir` on the backend `url`, with `env` on top.
    fn run(&self, url: &str, dir: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pulumi"));
        cmd.args(args)
            .current_dir(self.path().join(dir))
            .env("PULUMI_BACKEND_URL", url)
            .env("PULUMI_CONFIG_PASSPHRASE", "correct horse")
            .stdin(Stdio::null());
        for var in CONNECTION_VARS.iter().chain(&[
            "PULUMI_STACK",
            "PULUMI_STAND_IN_DELAY_MS",
            "PULUMI_STAND_IN_FAIL",
        ]) {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied());
        cmd.output().unwrap()
    }

    fn ok(&self, url: &str, dir: &str, args: &[&str]) -> String {
        let out = self.run(url, dir, args, &[]);
        assert!(
            out.status.success(),
            "pulumi {args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    fn init(&self, url: &str, dir: &str) {
        self.ok(url, dir, &["--non-interactive", "stack", "init", "dev"]);
    }

    fn up(&self, url: &str, dir: &str) {
        self.ok(
            url,
            dir,
            &[
                "--non-interactive",
                "up",
                "--yes",
                "--skip-preview",
                "-s",
                "dev",
            ],
        );
    }

    fn outputs(&self, url: &str, dir: &str) -> Value {
        let args = [
            "--non-interactive",
            "stack",
            "output",
            "--json",
            "--show-secrets",
            "-s",
            "dev",
        ];
        serde_json::from_str(&self.ok(url, dir, &args)).unwrap()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The table's rows: each key and its object's bytes, after checking the row's JSON shape.
fn rows(server: &Server, db: &str, table: &str) -> BTreeMap<String, Vec<u8>> {
    let sql = format!("SELECT key, data::text FROM {table} ORDER BY key");
    server
        .sql(db, &sql)
        .lines()
        .map(|line| {
            let (key, data) = line.split_once('|').unwrap();
            let blob: Value = serde_json::from_str(data).unwrap();
            let object = blob.as_object().unwrap();
            assert_eq!(object.len(), 1, "{data}");
            let bytes = B64.decode(object["data"].as_str().unwrap()).unwrap();
            (key.to_string(), bytes)
        })
        .collect()
}

/// The table and its index, as Pulumi's `schema.sql` makes them.
fn assert_pulumis_schema(server: &Server, db: &str) {
    let columns = server.sql(
        db,
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns WHERE table_name = 'pulumi_state' ORDER BY ordinal_position",
    );
    assert_eq!(
        columns,
        "key|text|NO\ndata|json|NO\nupdated_at|timestamp with time zone|NO\n"
    );
    let index = server.sql(
        db,
        "SELECT indexdef FROM pg_indexes WHERE indexname = 'pulumi_state_key_prefix_idx'",
    );
    assert!(index.contains("(key text_pattern_ops)"), "{index}");
}

/// The checkpoint among the rows at `key`.
fn checkpoint(rows: &BTreeMap<String, Vec<u8>>, key: &str) -> Value {
    serde_json::from_slice(&rows[key]).unwrap()
}

fn keys(rows: &BTreeMap<String, Vec<u8>>) -> Vec<&str> {
    rows.keys().map(String::as_str).collect()
}

#[test]
fn a_stacks_life_is_kept_in_the_table_as_pulumi_keeps_it() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("ledger");
    let s = Scratch::new();
    s.init(&url, "a");
    assert_pulumis_schema(&server, "ledger");
    // Keys are the DIY paths under the URL's path (the database's name).
    let after_init = rows(&server, "ledger", "pulumi_state");
    assert_eq!(
        keys(&after_init),
        [
            "ledger/.pulumi/meta.yaml",
            "ledger/.pulumi/stacks/proj-a/dev.json"
        ]
    );
    assert_eq!(after_init["ledger/.pulumi/meta.yaml"], b"version: 1\n");
    let created = checkpoint(&after_init, "ledger/.pulumi/stacks/proj-a/dev.json");
    assert_eq!(created["checkpoint"]["stack"], "organization/proj-a/dev");
    assert!(created["checkpoint"]["latest"]["resources"].is_null());

    s.up(&url, "a");
    let after_up = rows(&server, "ledger", "pulumi_state");
    assert_eq!(
        keys(&after_up),
        [
            "ledger/.pulumi/meta.yaml",
            "ledger/.pulumi/stacks/proj-a/dev.json",
            "ledger/.pulumi/stacks/proj-a/dev.json.bak",
        ],
        "no lock is left behind"
    );
    let updated = checkpoint(&after_up, "ledger/.pulumi/stacks/proj-a/dev.json");
    let outputs = &updated["checkpoint"]["latest"]["resources"][0]["outputs"];
    assert_eq!(outputs["message"], "hello world");
    let all = server.sql("ledger", "SELECT data::text FROM pulumi_state");
    assert!(!all.contains("t0k3n"));
    for rows in after_up.values() {
        assert!(
            !text(rows).contains("t0k3n"),
            "no plaintext secret in any object"
        );
    }

    let preview = [
        "--non-interactive",
        "preview",
        "--expect-no-changes",
        "-s",
        "dev",
    ];
    s.ok(&url, "a", &preview);
    let outputs = s.outputs(&url, "a");
    assert_eq!(
        outputs,
        json!({"message": "hello world", "token": "t0k3n-dev"})
    );
    let listed: Value = serde_json::from_str(&s.ok(&url, "a", &["stack", "ls", "--json"])).unwrap();
    assert_eq!(listed[0]["name"], "dev");
    assert_eq!(listed[0]["resourceCount"], 1);

    destroy_and_remove(&server, &s, &url);
}

/// `destroy`, then `stack rm`: the checkpoint emptied, then kept as `.bak` alone.
fn destroy_and_remove(server: &Server, s: &Scratch, url: &str) {
    s.ok(
        url,
        "a",
        &[
            "--non-interactive",
            "destroy",
            "--yes",
            "--skip-preview",
            "-s",
            "dev",
        ],
    );
    let destroyed = rows(server, "ledger", "pulumi_state");
    let emptied = checkpoint(&destroyed, "ledger/.pulumi/stacks/proj-a/dev.json");
    assert!(emptied["checkpoint"]["latest"]["resources"].is_null());

    s.ok(
        url,
        "a",
        &["--non-interactive", "stack", "rm", "--yes", "dev"],
    );
    let removed = rows(server, "ledger", "pulumi_state");
    assert_eq!(
        keys(&removed),
        [
            "ledger/.pulumi/meta.yaml",
            "ledger/.pulumi/stacks/proj-a/dev.json.bak"
        ]
    );
    let out = s.run(
        url,
        "a",
        &["--non-interactive", "stack", "select", "dev"],
        &[],
    );
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
}

#[test]
fn two_projects_share_a_named_table_and_read_each_other() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = format!("{}&table=platform_state", server.url("shared"));
    let s = Scratch::new();
    for project in ["a", "b"] {
        s.init(&url, project);
    }
    s.up(&url, "a");
    s.up(&url, "b");
    let outputs = s.outputs(&url, "b");
    assert_eq!(
        outputs,
        json!({"copied": "hello world", "token": "t0k3n-dev"})
    );
    let stored = rows(&server, "shared", "platform_state");
    assert!(stored.contains_key("shared/.pulumi/stacks/proj-a/dev.json"));
    assert!(stored.contains_key("shared/.pulumi/stacks/proj-b/dev.json"));
    assert_eq!(
        server.sql("shared", "SELECT to_regclass('pulumi_state') IS NULL"),
        "t\n",
        "the default table is not made when another is named"
    );
    // Without a path in the URL, the database comes from PGDATABASE and keys have no prefix.
    let bare = format!("postgres://mara@127.0.0.1:{}?sslmode=disable", server.port);
    let env = [("PGDATABASE", "shared")];
    let out = s.run(
        &bare,
        "a",
        &["--non-interactive", "stack", "init", "prod"],
        &env,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stored = rows(&server, "shared", "pulumi_state");
    assert_eq!(
        keys(&stored),
        [".pulumi/meta.yaml", ".pulumi/stacks/proj-a/prod.json"]
    );
}

#[test]
fn pgpassword_signs_a_password_role_in_and_a_wrong_one_is_refused() {
    let Some(server) = Server::start() else {
        return;
    };
    server.url("ledger");
    server.role_with_password("alice", "s3cret-pw");
    server.sql("ledger", "GRANT CREATE ON SCHEMA public TO alice");
    let url = format!(
        "postgres://alice@127.0.0.1:{}/ledger?sslmode=disable",
        server.port
    );
    let s = Scratch::new();
    let init = ["--non-interactive", "stack", "init", "dev"];
    let out = s.run(&url, "a", &init, &[("PGPASSWORD", "s3cret-pw")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let owner = server.sql(
        "ledger",
        "SELECT tableowner FROM pg_tables WHERE tablename = 'pulumi_state'",
    );
    assert_eq!(owner, "alice\n");

    let refused = format!(
        "error: unable to open state database \"{url}\": failed to ping PostgreSQL: pq: password authentication failed for user \"alice\" (28P01)\n"
    );
    let out = s.run(&url, "a", &init, &[("PGPASSWORD", "wrong")]);
    assert_eq!(
        (out.status.code(), text(&out.stderr)),
        (Some(1), refused.clone())
    );
    let out = s.run(&url, "a", &init, &[]);
    assert_eq!((out.status.code(), text(&out.stderr)), (Some(1), refused));
    // A password in the URL works too, and is never shown.
    let inline = format!(
        "postgres://alice:wr0ng-inline@127.0.0.1:{}/ledger?sslmode=disable",
        server.port
    );
    let out = s.run(&inline, "a", &init, &[]);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!said.contains("wr0ng-inline"), "{said}");
    assert!(said.contains("postgres://alice:xxxxx@127.0.0.1"), "{said}");
    // PGUSER and PGHOST fill in what the URL leaves out.
    let bare = format!("postgres://:{}/ledger?sslmode=disable", server.port);
    let env = [
        ("PGUSER", "alice"),
        ("PGHOST", "127.0.0.1"),
        ("PGPASSWORD", "s3cret-pw"),
    ];
    let out = s.run(&bare, "a", &["stack", "ls", "--json"], &env);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("\"dev\""));
}

#[test]
fn connections_follow_lib_pq_v1_12_3() {
    let Some(server) = Server::start() else {
        return;
    };
    let base = server.url("ledger");
    let plain = base.trim_end_matches("?sslmode=disable");
    let s = Scratch::new();
    let ls = ["stack", "ls", "--json"];
    let fails = |url: &str, env: &[(&str, &str)], why: &str| {
        let out = s.run(url, "a", &ls, env);
        let expected = format!(
            "error: unable to open state database \"{url}\": failed to ping PostgreSQL: {why}\n"
        );
        assert_eq!((out.status.code(), text(&out.stderr)), (Some(1), expected));
    };
    // No sslmode is lib/pq's `require`, which a server without TLS turns down.
    fails(plain, &[], "pq: SSL is not enabled on the server");
    fails(
        &format!("{plain}?sslmode=require"),
        &[],
        "pq: SSL is not enabled on the server",
    );
    fails(
        plain,
        &[("PGSSLMODE", "verify-full")],
        "pq: SSL is not enabled on the server",
    );
    fails(
        &format!("{plain}?sslmode=bogus"),
        &[],
        "pq: wrong value for \"sslmode\": \"bogus\" is not supported; supported values are disable, allow, prefer, require, verify-full, or verify-ca",
    );
    // prefer and allow (lib/pq ≥ 1.12, Pulumi ≥ 3.245) fall back to a plain connection.
    for mode in ["prefer", "allow"] {
        let out = s.run(&format!("{plain}?sslmode={mode}"), "a", &ls, &[]);
        assert!(out.status.success(), "{mode}: {}", text(&out.stderr));
    }
    assert!(
        s.run(plain, "a", &ls, &[("PGSSLMODE", "disable")])
            .status
            .success()
    );
    // lib/pq 1.10.9 (Pulumi 3.177 to 3.244) refused them, once connected.
    let old = [("PULUMI_STAND_IN_LIBPQ", "1.10.9")];
    fails(
        &format!("{plain}?sslmode=prefer"),
        &old,
        "pq: unsupported sslmode \"prefer\"; only \"require\" (default), \"verify-full\", \"verify-ca\", and \"disable\" supported",
    );
    // A parameter lib/pq does not know goes to the server, which refuses an unknown one.
    fails(
        &format!("{base}&no_such_setting=1"),
        &[],
        "pq: unrecognized configuration parameter \"no_such_setting\" (42704)",
    );
    assert!(
        s.run(&format!("{base}&search_path=public"), "a", &ls, &[])
            .status
            .success()
    );
    fails(
        &base.replace("/ledger", "/missing"),
        &[],
        "pq: database \"missing\" does not exist (3D000)",
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let nowhere = format!("postgres://mara@127.0.0.1:{port}/ledger?sslmode=disable");
    fails(
        &nowhere,
        &[],
        &format!("dial tcp 127.0.0.1:{port}: connect: connection refused"),
    );
    // `host=<directory>`: the server's Unix socket, where lib/pq uses no TLS.
    let socket = format!(
        "postgres://mara@/ledger?host={}&port={}",
        server.dir().display(),
        server.port
    );
    let out = s.run(&socket, "a", &ls, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn tls_modes_check_the_certificate_as_lib_pq_does() {
    let Some((server, authority)) = Server::start_tls() else {
        return;
    };
    server.url("ledger");
    let ca = authority.display().to_string();
    let s = Scratch::new();
    let ls = ["stack", "ls", "--json"];
    let url =
        |host: &str, query: &str| format!("postgres://mara@{host}:{}/ledger?{query}", server.port);
    let works = |url: &str, env: &[(&str, &str)]| {
        let out = s.run(url, "a", &ls, env);
        assert!(out.status.success(), "{url}: {}", text(&out.stderr));
    };
    let fails = |url: &str, env: &[(&str, &str)], why: &str| {
        let out = s.run(url, "a", &ls, env);
        let expected = format!(
            "error: unable to open state database \"{url}\": failed to ping PostgreSQL: {why}\n"
        );
        assert_eq!((out.status.code(), text(&out.stderr)), (Some(1), expected));
    };
    // The unset mode and `require` take any certificate.
    works(&url("127.0.0.1", "table=t"), &[]);
    works(&url("127.0.0.1", "sslmode=require"), &[]);
    // verify-full: the system's roots (which SSL_CERT_FILE replaces) or sslrootcert's alone.
    let unknown =
        "tls: failed to verify certificate: x509: certificate signed by unknown authority";
    fails(&url("127.0.0.1", "sslmode=verify-full"), &[], unknown);
    works(
        &url("127.0.0.1", "sslmode=verify-full"),
        &[("SSL_CERT_FILE", &ca)],
    );
    works(
        &url(
            "127.0.0.1",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        &[],
    );
    works(
        &url("127.0.0.1", "sslmode=verify-full"),
        &[("PGSSLROOTCERT", &ca)],
    );
    // The certificate is for 127.0.0.1: verify-full checks the name, verify-ca does not.
    fails(
        &url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        &[],
        "tls: failed to verify certificate: x509: certificate is not valid for any names, but wanted to match localhost",
    );
    works(
        &url("localhost", &format!("sslmode=verify-ca&sslrootcert={ca}")),
        &[],
    );
    fails(
        &url("localhost", "sslmode=verify-ca"),
        &[],
        "x509: certificate signed by unknown authority",
    );
    // `require` with a root certificate that exists is verify-ca.
    let other = "/etc/ssl/certs/ca-certificates.crt";
    if Path::new(other).exists() {
        fails(
            &url("127.0.0.1", &format!("sslmode=require&sslrootcert={other}")),
            &[],
            "x509: certificate signed by unknown authority",
        );
    }
    works(
        &url("127.0.0.1", "sslmode=require&sslrootcert=/nonexistent.pem"),
        &[],
    );
}

#[test]
fn a_held_lock_refuses_a_second_up_until_it_is_released() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("ledger");
    let s = Scratch::new();
    s.init(&url, "a");
    // An `up` that takes its time holds the lock, a row of the table, meanwhile.
    let mut slow = Command::new(env!("CARGO_BIN_EXE_pulumi"));
    slow.args([
        "--non-interactive",
        "up",
        "--yes",
        "--skip-preview",
        "-s",
        "dev",
    ])
    .current_dir(s.path().join("a"))
    .env("PULUMI_BACKEND_URL", &url)
    .env("PULUMI_CONFIG_PASSPHRASE", "correct horse")
    .env("PULUMI_STAND_IN_DELAY_MS", "4000")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for var in CONNECTION_VARS {
        slow.env_remove(var);
    }
    let slow = slow.spawn().unwrap();
    let lock_dir = "ledger/.pulumi/locks/organization/proj-a/dev/";
    let held = format!("SELECT key FROM pulumi_state WHERE key LIKE '{lock_dir}%'");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let lock = loop {
        let found = server.sql("ledger", &held);
        if !found.is_empty() {
            break found.trim().to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lock never showed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let up = [
        "--non-interactive",
        "up",
        "--yes",
        "--skip-preview",
        "-s",
        "dev",
    ];
    let out = s.run(&url, "a", &up, &[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let id = lock.strip_prefix(lock_dir).unwrap();
    let expected = format!(
        "  postgres://****:****@127.0.0.1:{}/ledger/.pulumi/locks/organization/proj-a/dev/{id}?sslmode=disable: created by ",
        server.port
    );
    assert!(
        err.starts_with("error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end or delete the lock file with `pulumi cancel`.\n")
            && err.contains(&expected),
        "{err}"
    );
    let first = slow.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert_eq!(server.sql("ledger", &held), "", "the lock is released");
    s.up(&url, "a");
    // A lock left by a process that died is what `pulumi cancel` deletes.
    let stale = B64
        .encode(r#"{"pid":4242,"username":"u","hostname":"h","timestamp":"2026-08-21T10:00:00Z"}"#);
    server.sql(
        "ledger",
        &format!("INSERT INTO pulumi_state (key, data) VALUES ('{lock_dir}stale.json', '{{\"data\":\"{stale}\"}}')"),
    );
    let out = s.run(&url, "a", &up, &[]);
    assert!(
        text(&out.stderr).contains(
            "stale.json?sslmode=disable: created by u@h (pid 4242) at 2026-08-21T10:00:00Z"
        )
    );
    s.ok(&url, "a", &["--non-interactive", "cancel", "--yes", "dev"]);
    s.up(&url, "a");
}

#[test]
fn stacks_move_from_a_file_backend_into_postgres_with_export_and_import() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("ledger");
    let s = Scratch::new();
    let files = format!("file://{}", s.path().join("state").display());
    for project in ["a", "b"] {
        s.init(&files, project);
        s.up(&files, project);
    }
    let before: Vec<Value> = ["a", "b"].iter().map(|p| s.outputs(&files, p)).collect();
    for project in ["a", "b"] {
        let export = s.path().join(format!("{project}.json"));
        let export = export.display().to_string();
        s.ok(
            &files,
            project,
            &["stack", "export", "--file", &export, "-s", "dev"],
        );
        // The stack's configuration file already holds its salt: `stack init` reuses it.
        let config =
            std::fs::read_to_string(s.path().join(project).join("Pulumi.dev.yaml")).unwrap();
        s.init(&url, project);
        let again =
            std::fs::read_to_string(s.path().join(project).join("Pulumi.dev.yaml")).unwrap();
        assert_eq!(config, again);
        let imported = s.ok(
            &url,
            project,
            &["stack", "import", "--file", &export, "-s", "dev"],
        );
        assert_eq!(imported, "Import complete.\n");
    }
    let after: Vec<Value> = ["a", "b"].iter().map(|p| s.outputs(&url, p)).collect();
    assert_eq!(before, after);
    let preview = [
        "--non-interactive",
        "preview",
        "--expect-no-changes",
        "-s",
        "dev",
    ];
    for project in ["a", "b"] {
        s.ok(&url, project, &preview);
    }
    let stored = rows(&server, "ledger", "pulumi_state");
    let imported = checkpoint(&stored, "ledger/.pulumi/stacks/proj-b/dev.json");
    assert_eq!(imported["checkpoint"]["stack"], "organization/proj-b/dev");
    let resources = imported["checkpoint"]["latest"]["resources"].as_array();
    assert_eq!(resources.map(Vec::len), Some(2));
    // The imported state is the state: an update on it changes nothing.
    let up = s.ok(
        &url,
        "b",
        &[
            "--non-interactive",
            "up",
            "--yes",
            "--skip-preview",
            "--json",
            "-s",
            "dev",
        ],
    );
    assert!(up.contains("\"resourceChanges\":{\"same\":2}"), "{up}");
}
