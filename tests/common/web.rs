//! `mara serve` for a test: started on a free loopback port in a workspace, asked over plain
//! HTTP/1.1 (a request a connection, as any client may), and stopped with Ctrl-C's signal.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Workspace;

/// A network, an application on it and its web front, each a command: the network's log has a
/// line that is HTML (`<script>alert(1)</script>`) and says whether it was given the serve's
/// token, the others sleep `MARA_TEST_SLEEP` seconds, the application's drift check exits with
/// `MARA_TEST_DRIFT` (2: drifted), and the web front exits with `MARA_TEST_WEB_EXIT`.
const PROVIDER: &str = r#"
description = "A network, an application on it, and its web front"
infra_type = "web"

[[project]]
path = "net"
stage = "infrastructure"
engine = "command"
up = '''
echo '<script>alert(1)</script>'
echo "network up; the serve token: ${MARA_SERVE_TOKEN:-not given}"
'''
destroy = "echo network down"

[[project]]
path = "app"
after = ["net"]
engine = "command"
up = '''
sleep "${MARA_TEST_SLEEP:-0}"
echo "application up"
'''
drift = 'exit "${MARA_TEST_DRIFT:-0}"'
destroy = "echo application down"

[[project]]
path = "web"
after = ["app"]
engine = "command"
up = '''
sleep "${MARA_TEST_SLEEP:-0}"
echo "web up"
echo '<img src=x onerror=alert(2)>'
exit "${MARA_TEST_WEB_EXIT:-0}"
'''
destroy = "echo web down"
"#;

pub fn workspace() -> Workspace {
    let w = Workspace::new(&[
        ("mara.toml", "provider = \"web\"\n"),
        ("providers/web.toml", PROVIDER),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
    ]);
    for dir in ["net", "app", "web"] {
        w.write(&format!("{dir}/README"), "a command project\n");
    }
    w
}

/// A command that reads three secrets back from the secrets project and prints each as
/// programs and engines do: as it is, its line broken at the secret's break with text glued
/// after it (a reader or an engine that breaks lines at a CR: Terraform's provisioners), as JSON
/// text once its breaks became LFs, and escaped twice (JSON inside JSON); after
/// `MARA_TEST_SLEEP` seconds.
const LEAKY: &str = r#"description = "A command that prints its secrets"
infra_type = "leaky"

[[project]]
path = "secrets"

[[project]]
path = "app"
after = ["secrets"]
engine = "command"
up = '''
sleep "${MARA_TEST_SLEEP:-0}"
for key in cr crlf lf; do
  pw=$(cd ../secrets && pulumi --non-interactive config get "app:$key" --stack dev)
  printf 'raw %s: %s.\n' "$key" "$pw"
  printf 'glued %s: %s_end\n' "$key" "$pw" | tr '\r' '\n'
  printf 'json %s: "%s"\n' "$key" "$(printf '%s' "$pw" | tr '\r' '\n' | sed -z 's/\n\n*/\\n/g')"
  printf 'twice %s: "%s"\n' "$key" "$(printf '%s' "$pw" | sed -z 's/\r/\\\\r/g; s/\n/\\\\n/g')"
done
'''
destroy = "true"

[[project.secret]]
key = "app:cr"
prompt = "A password with a CR"

[[project.secret]]
key = "app:crlf"
prompt = "A password with a CRLF"

[[project.secret]]
key = "app:lf"
prompt = "A password with an LF"
"#;

/// The three secrets, by variable, and their parts.
pub const BROKEN: [(&str, &str, [&str; 2]); 3] = [
    (
        "MARA_SECRET_APP_CR",
        "Sup3rS3cretDb\rPw-1",
        ["Sup3rS3cretDb", "Pw-1"],
    ),
    (
        "MARA_SECRET_APP_CRLF",
        "Cr1fS3cretDb\r\nPw-2",
        ["Cr1fS3cretDb", "Pw-2"],
    ),
    (
        "MARA_SECRET_APP_LF",
        "L1neS3cretDb\nPw-3",
        ["L1neS3cretDb", "Pw-3"],
    ),
];

/// `text` holds no part of the three secrets.
pub fn holds_no_broken_secret(place: &str, text: &str) {
    for (_, _, parts) in BROKEN {
        for part in parts {
            assert!(!text.contains(part), "{part:?} in {place}: {text}");
        }
    }
}

/// A workspace of `LEAKY`, its secrets project a Pulumi YAML project (for the stand-in).
pub fn leaky_workspace() -> Workspace {
    Workspace::new(&[
        (
            "mara.toml",
            "provider = \"leaky\"\nsecrets_project = \"secrets\"\n",
        ),
        ("providers/leaky.toml", LEAKY),
        (
            "config/pulumi/environment",
            "PULUMI_STACK=dev\nPULUMI_BACKEND_URL=file://.mara/pulumi-state\nPULUMI_CONFIG_PASSPHRASE=leaky-test\n",
        ),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  kubernetes:infra_type: leaky\n",
        ),
        ("secrets/Pulumi.yaml", "name: secrets\nruntime: yaml\n"),
        ("app/README", "a command project\n"),
    ])
}

/// `mara up` with projects that sleep `seconds`, started in the background.
pub fn slow_up(w: &Workspace, seconds: &str) -> std::process::Child {
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("mara"));
    cmd.current_dir(w.path())
        .args(["up", "--yes"])
        .env("NO_COLOR", "1")
        .env("MARA_TEST_SLEEP", seconds)
        .env_remove("MARA_LEDGER_URL")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cmd.spawn().unwrap()
}

/// The run in progress once `project` of it is running.
pub fn run_running(serve: &Serve, project: &str) -> String {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Some(run) = runs(serve).first().filter(|r| r["status"] == "running") {
            let id = run["run_id"].as_str().unwrap().to_string();
            let detail = serve.get(&format!("/api/runs/{id}")).json();
            let found = (detail["projects"].as_array().unwrap().iter())
                .any(|p| p["path"] == project && p["status"] == "running");
            if found {
                return id;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no run got to running {project}");
}

/// The runs as `/api/runs` lists them.
pub fn runs(serve: &Serve) -> Vec<serde_json::Value> {
    let reply = serve.get("/api/runs");
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json().as_array().unwrap().clone()
}

pub struct Serve {
    /// `None`: a second client of a server another `Serve` started (`probe`).
    child: Option<Child>,
    /// The address it is reached at: 127.0.0.1, or the one it listens on.
    pub host: String,
    pub port: u16,
    /// What the server wrote on stderr.
    said: Arc<Mutex<String>>,
}

impl Serve {
    /// `mara serve --listen 127.0.0.1:0` in `dir` with `env`, once it listens.
    pub fn start(dir: &Path, env: &[(&str, &str)]) -> Serve {
        Serve::start_with(dir, env, &[])
    }

    /// `start`, with more arguments.
    pub fn start_with(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Serve {
        Serve::start_on(dir, env, "127.0.0.1:0", args)
    }

    /// `mara serve --listen LISTEN` (an address, port 0), reached at that address (127.0.0.1
    /// for 0.0.0.0).
    pub fn start_on(dir: &Path, env: &[(&str, &str)], listen: &str, args: &[&str]) -> Serve {
        let mut command = Command::new(assert_cmd::cargo::cargo_bin("mara"));
        command
            .current_dir(dir)
            .args(["serve", "--listen", listen])
            .args(args)
            .env("NO_COLOR", "1")
            .env_remove("MARA_SERVE_TOKEN")
            .env_remove("MARA_LEDGER_URL")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        Serve::spawned(command)
    }

    /// `start_with`, the server allowed to open at most `files` files (its connections among
    /// them), as a machine's low limit would.
    pub fn start_with_files(dir: &Path, files: u64) -> Serve {
        use std::os::unix::process::CommandExt;
        let mut command = Command::new(assert_cmd::cargo::cargo_bin("mara"));
        command
            .current_dir(dir)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("NO_COLOR", "1")
            .env_remove("MARA_SERVE_TOKEN")
            .env_remove("MARA_LEDGER_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let limit = libc::rlimit {
            rlim_cur: files,
            rlim_max: files,
        };
        // SAFETY: setrlimit is async-signal-safe, and the limit is a plain value.
        unsafe {
            command.pre_exec(move || match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            });
        }
        Serve::spawned(command)
    }

    /// The server `command` starts, once it says where it listens.
    fn spawned(mut command: Command) -> Serve {
        let mut child = command.spawn().expect("start mara serve");
        let mut stderr = BufReader::new(child.stderr.take().expect("its stderr"));
        // Its debug lines (`MARA_LOG`) may come first.
        let mut first = String::new();
        loop {
            let read = stderr
                .read_line(&mut first)
                .expect("read what mara serve says");
            if read == 0 || first.contains(" on http://") || !first.starts_with("DEBUG ") {
                break;
            }
        }
        let (host, port) = (first.split(" on http://").nth(1))
            .and_then(|rest| rest.split('/').next())
            .and_then(|bound| bound.rsplit_once(':'))
            .and_then(|(host, port)| Some((host.to_string(), port.parse().ok()?)))
            .unwrap_or_else(|| panic!("mara serve did not say where it listens: {first:?}"));
        let host = match host.as_str() {
            "0.0.0.0" => "127.0.0.1".to_string(),
            _ => host,
        };
        let said = Arc::new(Mutex::new(first.clone()));
        let rest = said.clone();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            rest.lock().unwrap().push_str(&text);
        });
        Serve {
            child: Some(child),
            host,
            port,
            said,
        }
    }

    /// A client of the server on `port`, which it does not stop.
    pub fn probe(port: u16) -> Serve {
        Serve {
            child: None,
            host: "127.0.0.1".into(),
            port,
            said: Arc::default(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}:{}{path}", self.host, self.port)
    }

    pub fn get(&self, path: &str) -> Reply {
        self.request("GET", path, &[])
    }

    pub fn post(&self, path: &str, token: Option<&str>) -> Reply {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = match &bearer {
            Some(value) => vec![("Authorization", value.as_str())],
            None => Vec::new(),
        };
        self.request("POST", path, &headers)
    }

    /// One request, its whole answer read.
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut stream = self.send(method, path, headers);
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).expect("read the answer");
        Reply::parse(&raw)
    }

    fn send(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> TcpStream {
        let mut stream = TcpStream::connect((self.host.as_str(), self.port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        if !headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("host"))
        {
            request.push_str(&format!("Host: {}:{}\r\n", self.host, self.port));
        }
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        if method == "POST" {
            request.push_str("Content-Length: 0\r\n");
        }
        request.push_str("\r\n");
        stream
            .write_all(request.as_bytes())
            .expect("send the request");
        stream
    }

    /// The event stream at `path`, as text, read until `enough` holds of what came, the stream
    /// ends, or `limit` passes.
    pub fn events(&self, path: &str, enough: impl Fn(&str) -> bool, limit: Duration) -> String {
        self.events_with(path, &[], enough, limit)
    }

    /// `events`, the request with `headers`.
    pub fn events_with(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        enough: impl Fn(&str) -> bool,
        limit: Duration,
    ) -> String {
        let mut reader = BufReader::new(self.send("GET", path, headers));
        let mut line = String::new();
        // The status line and the headers.
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
        }
        let start = Instant::now();
        let mut text = String::new();
        while start.elapsed() < limit && !enough(&text) {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            let size = usize::from_str_radix(line.trim(), 16).unwrap_or(0);
            if size == 0 {
                break;
            }
            let mut chunk = vec![0; size + 2];
            if reader.read_exact(&mut chunk).is_err() {
                break;
            }
            text.push_str(&String::from_utf8_lossy(&chunk[..size]));
        }
        text
    }

    /// What the server wrote on stderr so far.
    pub fn said(&self) -> String {
        self.said.lock().unwrap().clone()
    }

    /// Ctrl-C's signal; its exit status, within ten seconds.
    pub fn stop(mut self) -> (Option<i32>, String) {
        let child = self.child.as_mut().expect("a server this test started");
        // SAFETY: kill(2) on the server's own pid.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGINT);
        }
        let start = Instant::now();
        let code = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status.code();
            }
            if start.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        std::thread::sleep(Duration::from_millis(100));
        let said = self.said.lock().unwrap().clone();
        (code, said)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// An answer: its status, headers (names in lower case) and body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    fn parse(raw: &[u8]) -> Reply {
        let text = String::from_utf8_lossy(raw).to_string();
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
        let mut lines = head.lines();
        let status = (lines.next().and_then(|l| l.split(' ').nth(1)))
            .and_then(|s| s.parse().ok())
            .expect("a status");
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let chunked = headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
        let body = match chunked {
            true => unchunk(body),
            false => body.to_string(),
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        (self.headers.iter())
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: not JSON: {}", self.body))
    }
}

fn unchunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}
