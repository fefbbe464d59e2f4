//! A real PostgreSQL server of a test's own: `initdb` and `pg_ctl` (Debian's `postgresql`
//! package, which `.ci/test` installs) on a temporary directory, listening on a loopback port.
//! As root (CI's containers), the server runs as the `postgres` user, since `initdb` refuses
//! root. Without the binaries a test fails where tools are required (`.ci/test`, CI), and is
//! skipped, and counted, elsewhere (`tools.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Server {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
    running: bool,
    /// Serving TLS with a certificate for 127.0.0.1 signed by the test's own authority.
    tls: bool,
}

/// The directory of `initdb` and `pg_ctl`: on PATH, else Debian's versioned directory.
fn binaries() -> Option<PathBuf> {
    if let Ok(initdb) = which::which("initdb") {
        let dir = initdb.canonicalize().ok()?.parent()?.to_path_buf();
        if dir.join("pg_ctl").is_file() {
            return Some(dir);
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file())
        .collect();
    versions.sort();
    versions.pop()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Server {
    /// A fresh server with a `mara` superuser (trust authentication), started; `None` (the test
    /// is skipped) without PostgreSQL, where tools are not required.
    pub fn start() -> Option<Server> {
        Server::started(false)
    }

    /// A server that serves TLS (`ssl = on`) with a certificate for 127.0.0.1 signed by an
    /// authority of the test's own, whose certificate is returned; `None` without PostgreSQL or
    /// `openssl`, where tools are not required.
    pub fn start_tls() -> Option<(Server, PathBuf)> {
        super::tools::tool("openssl", "it makes the test's certificates")?;
        let server = Server::started(true)?;
        let authority = server.dir.path().join("ca.pem");
        Some((server, authority))
    }

    fn started(tls: bool) -> Option<Server> {
        let Some(bin) = binaries() else {
            return super::tools::missing("PostgreSQL's server (initdb, pg_ctl) is not installed");
        };
        let dir = tempfile::tempdir().unwrap();
        // The server's user must reach its directory.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = Server {
            dir,
            bin,
            port,
            running: false,
            tls,
        };
        if tls {
            certificates(server.dir.path());
        }
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(server.dir.path())
                .status()
                .unwrap();
            assert!(status.success(), "chown to postgres");
        }
        let initdb = server.tool(
            "initdb",
            &[
                "-D",
                &server.data().display().to_string(),
                "-U",
                "mara",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        assert!(
            initdb.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        let mut server = server;
        server.resume();
        Some(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A PostgreSQL program, as the server's user.
    fn tool(&self, name: &str, args: &[&str]) -> std::process::Output {
        let program = self.bin.join(name);
        let mut command = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        command
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap()
    }

    /// A client program (`psql`, `pg_dump`) on the server, as its `mara` user, with `args`.
    fn client(&self, program: &str, args: &[&str]) -> std::process::Output {
        let port = self.port.to_string();
        let mut all = vec!["-h", "127.0.0.1", "-p", &port, "-U", "mara"];
        all.extend_from_slice(args);
        self.tool(program, &all)
    }

    /// The URL of database `name` (made on first use).
    pub fn url(&self, name: &str) -> String {
        let create = format!("CREATE DATABASE \"{name}\"");
        let created = self.client("psql", &["-d", "postgres", "-c", &create]);
        let said = String::from_utf8_lossy(&created.stderr);
        assert!(
            created.status.success() || said.contains("already exists"),
            "createdb: {said}"
        );
        format!(
            "postgres://mara@127.0.0.1:{}/{name}?sslmode=disable",
            self.port
        )
    }

    /// Makes a role `name` that logs in over TCP with `password`, checked with SCRAM-SHA-256: the
    /// role is created with that password, a `host all <name> 127.0.0.1/32 scram-sha-256` line
    /// goes first in `pg_hba.conf` (the rest stays trust) and the server reloads, which this
    /// waits for. The role owns nothing and may create nothing: grant it what the test needs
    /// with [`Server::sql`] (`GRANT CREATE ON SCHEMA public TO <name>` in a database lets it
    /// create tables there).
    pub fn role_with_password(&self, name: &str, password: &str) {
        let password = password.replace('\'', "''");
        self.sql(
            "postgres",
            &format!("CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'"),
        );
        let hba = self.data().join("pg_hba.conf");
        let rules = std::fs::read_to_string(&hba).unwrap();
        let line = format!("host all \"{name}\" 127.0.0.1/32 scram-sha-256\n");
        std::fs::write(&hba, format!("{line}{rules}")).unwrap();
        let data = self.data().display().to_string();
        let reloaded = self.tool("pg_ctl", &["-D", &data, "reload"]);
        assert!(
            reloaded.status.success(),
            "pg_ctl reload: {}",
            String::from_utf8_lossy(&reloaded.stderr)
        );
        // The postmaster rereads pg_hba.conf on its own time: until then the role gets in
        // without a password.
        let port = self.port.to_string();
        for _ in 0..100 {
            let trusted = Command::new(self.bin.join("psql"))
                .args(["-w", "-h", "127.0.0.1", "-p", &port, "-U", name])
                .args(["-d", "postgres", "-c", "SELECT 1"])
                .env_remove("PGPASSWORD")
                .env_remove("PGPASSFILE")
                .output()
                .unwrap();
            if !trusted.status.success() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("the server never asked {name} for a password");
    }

    /// Runs SQL with `psql`, returning its unaligned output.
    pub fn sql(&self, database: &str, sql: &str) -> String {
        let output = self.client("psql", &["-d", database, "-At", "-c", sql]);
        assert!(
            output.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Everything database `name` holds, as `pg_dump` writes it.
    pub fn dump(&self, name: &str) -> String {
        let output = self.client("pg_dump", &[name]);
        assert!(
            output.status.success(),
            "pg_dump: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Stops the server at once (as a crash or a lost network would look to its clients).
    pub fn stop(&mut self) {
        let data = self.data().display().to_string();
        let _ = self.tool("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
        self.running = false;
    }

    /// Starts it (again), on the same port.
    pub fn resume(&mut self) {
        let data = self.data().display().to_string();
        let mut options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        if self.tls {
            let dir = self.dir.path().display();
            options.push_str(&format!(
                " -c ssl=on -c ssl_cert_file={dir}/server.crt -c ssl_key_file={dir}/server.key"
            ));
        }
        let log = self.dir.path().join("server.log").display().to_string();
        let started = self.tool(
            "pg_ctl",
            &["-D", &data, "-o", &options, "-l", &log, "-w", "start"],
        );
        assert!(
            started.status.success(),
            "pg_ctl start: {}{}",
            String::from_utf8_lossy(&started.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        self.running = true;
    }

    /// Stops the postmaster (SIGSTOP) without closing anything: a connection is accepted by the
    /// kernel, and then nothing answers it.
    pub fn freeze(&self) {
        self.signal_postmaster(libc::SIGSTOP);
    }

    /// Continues a frozen postmaster (SIGCONT).
    pub fn thaw(&self) {
        self.signal_postmaster(libc::SIGCONT);
    }

    fn signal_postmaster(&self, signal: i32) {
        let pid = std::fs::read_to_string(self.data().join("postmaster.pid")).unwrap();
        let pid: i32 = pid.lines().next().unwrap().trim().parse().unwrap();
        // SAFETY: kill only sends a signal, to the test's own server.
        assert_eq!(
            unsafe { libc::kill(pid, signal) },
            0,
            "signal the postmaster"
        );
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// A certificate authority (`ca.pem`) and a server certificate for 127.0.0.1 it signed
/// (`server.crt`, `server.key`), made with `openssl` in `dir`.
fn certificates(dir: &Path) {
    let openssl = |args: &[&str]| {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=mara test authority",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    std::fs::set_permissions(
        dir.join("server.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.running {
            self.stop();
        }
    }
}
