//! The connection settings as lib/pq v1.12.3 (the driver of Pulumi v3.259, `pkg/go.mod`) makes
//! them (`connector.go`, `newConfig`): its defaults (`localhost`, port 5432, the OS user), then
//! the libpq environment variables it reads, then the URL (`convertURL`: user, password, host,
//! port, the path as `dbname`, every non-empty query parameter), a later source overriding an
//! earlier one. A parameter lib/pq does not know is a run-time parameter sent to the server at
//! startup (as `-c key=value` in `options` here, which the server treats alike). Errors read as
//! lib/pq's (`pq: wrong value for "sslmode": …`).
//!
//! Not implemented, and refused with a message saying so when set: multiple hosts, `hostaddr`,
//! `passfile` (and `~/.pgpass`), client certificates (`sslcert`, `sslkey`, `sslinline`), Kerberos,
//! `sslnegotiation`, the TLS and protocol version bounds, `target_session_attrs`,
//! `load_balance_hosts` and service files. `tz`, `geqo`, `binary_parameters` and
//! `disable_prepared_binary_result` are read and change nothing the stand-in does.

use std::time::Duration;

use super::url::GoUrl;

/// lib/pq's `sslmode`; `Default` is the mode left unset, which behaves as `require`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Default,
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    const NAMES: [(&'static str, SslMode); 6] = [
        ("disable", SslMode::Disable),
        ("allow", SslMode::Allow),
        ("prefer", SslMode::Prefer),
        ("require", SslMode::Require),
        ("verify-full", SslMode::VerifyFull),
        ("verify-ca", SslMode::VerifyCa),
    ];

    pub fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("", |(n, _)| n)
    }
}

pub struct ConnInfo {
    pub host: String,
    pub port: u16,
    pub dbname: Option<String>,
    pub user: String,
    pub password: String,
    pub options: String,
    pub application_name: Option<String>,
    pub sslmode: SslMode,
    pub sslrootcert: Option<String>,
    pub sslsni: bool,
    pub connect_timeout: Option<Duration>,
    /// Run-time parameters: the URL's parameters lib/pq does not know.
    pub runtime: Vec<(String, String)>,
    /// What lib/pq v1.10.9 (`PULUMI_STAND_IN_LIBPQ=1.10.9`) says once the host is dialled: a
    /// `sslmode` it does not know.
    pub refused: Option<String>,
    legacy: bool,
    /// Parameters set, by lib/pq's name.
    set: Vec<String>,
}

/// The libpq environment variables lib/pq reads, and its parameter for each.
const ENV: [(&str, &str); 28] = [
    ("PGHOST", "host"),
    ("PGHOSTADDR", "hostaddr"),
    ("PGPORT", "port"),
    ("PGDATABASE", "dbname"),
    ("PGUSER", "user"),
    ("PGPASSWORD", "password"),
    ("PGPASSFILE", "passfile"),
    ("PGOPTIONS", "options"),
    ("PGAPPNAME", "application_name"),
    ("PGSSLMODE", "sslmode"),
    ("PGSSLNEGOTIATION", "sslnegotiation"),
    ("PGSSLCERT", "sslcert"),
    ("PGSSLKEY", "sslkey"),
    ("PGSSLROOTCERT", "sslrootcert"),
    ("PGSSLSNI", "sslsni"),
    ("SSLPGMINPROTOCOLVERSION", "ssl_min_protocol_version"),
    ("SSLPGMAXPROTOCOLVERSION", "ssl_max_protocol_version"),
    ("PGKRBSRVNAME", "krbsrvname"),
    ("PGCONNECT_TIMEOUT", "connect_timeout"),
    ("PGCLIENTENCODING", "client_encoding"),
    ("PGDATESTYLE", "datestyle"),
    ("PGTZ", "tz"),
    ("PGGEQO", "geqo"),
    ("PGTARGETSESSIONATTRS", "target_session_attrs"),
    ("PGLOADBALANCEHOSTS", "load_balance_hosts"),
    ("PGMINPROTOCOLVERSION", "min_protocol_version"),
    ("PGMAXPROTOCOLVERSION", "max_protocol_version"),
    ("PGSERVICE", "service"),
];

/// Environment variables lib/pq refuses outright.
const ENV_REFUSED: [&str; 11] = [
    "PGREQUIRESSL",
    "PGSSLCOMPRESSION",
    "PGREALM",
    "PGGSSENCMODE",
    "PGGSSDELEGATION",
    "PGGSSLIB",
    "PGREQUIREAUTH",
    "PGCHANNELBINDING",
    "PGSSLCERTMODE",
    "PGSSLCRL",
    "PGSSLCRLDIR",
];

/// lib/pq parameters the stand-in does not implement.
const UNIMPLEMENTED: [&str; 14] = [
    "hostaddr",
    "passfile",
    "sslnegotiation",
    "sslcert",
    "sslkey",
    "sslinline",
    "krbsrvname",
    "krbspn",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "target_session_attrs",
    "load_balance_hosts",
    "min_protocol_version",
    "max_protocol_version",
];

/// lib/pq parameters read and left without effect here.
const INERT: [&str; 5] = [
    "tz",
    "geqo",
    "binary_parameters",
    "disable_prepared_binary_result",
    "fallback_application_name",
];

/// Where a setting came from: its name in lib/pq's error messages.
enum Source<'a> {
    Env(&'a str),
    Url,
}

impl ConnInfo {
    /// The settings for `url` (its query without `table`) in the environment `env`.
    pub fn new(
        url: &GoUrl,
        query: &[(String, String)],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ConnInfo, String> {
        let mut info = ConnInfo {
            host: "localhost".into(),
            port: 5432,
            dbname: None,
            user: String::new(),
            password: String::new(),
            options: String::new(),
            application_name: None,
            sslmode: SslMode::Default,
            sslrootcert: None,
            sslsni: true,
            connect_timeout: None,
            runtime: Vec::new(),
            refused: None,
            legacy: env("PULUMI_STAND_IN_LIBPQ").is_some_and(|v| v.starts_with("1.10")),
            set: Vec::new(),
        };
        for name in ENV_REFUSED {
            if env(name).is_some() {
                return Err(format!("pq: environment variable ${name} is not supported"));
            }
        }
        for (var, key) in ENV {
            if let Some(value) = env(var) {
                info.set(key, &value, &Source::Env(var))?;
            }
        }
        for (key, value) in url_settings(url, query) {
            info.set(&key, &value, &Source::Url)?;
        }
        info.finish(env)?;
        Ok(info)
    }

    fn isset(&self, key: &str) -> bool {
        self.set.iter().any(|k| k == key)
    }

    /// One setting, checked as lib/pq's `setFromTag` checks it.
    fn set(&mut self, key: &str, value: &str, source: &Source) -> Result<(), String> {
        let wrong = |why: String| match source {
            Source::Env(var) => format!("pq: wrong value for ${var}: {why}"),
            Source::Url => format!("pq: wrong value for \"{key}\": {why}"),
        };
        match key {
            "host" if value.contains(',') => return Err(unimplemented("several hosts")),
            "host" => self.host = value.into(),
            "port" => self.port = parse_port(value).map_err(wrong)?,
            "dbname" | "database" => self.dbname = Some(value.into()),
            "user" => self.user = value.into(),
            "password" => self.password = value.into(),
            "options" => self.options = value.into(),
            "application_name" => self.application_name = Some(value.into()),
            "sslmode" if self.legacy => self.legacy_sslmode(value),
            "sslmode" => self.sslmode = parse_sslmode(value).map_err(wrong)?,
            "sslrootcert" => self.sslrootcert = Some(value.into()),
            "sslsni" => self.sslsni = parse_bool(value).map_err(wrong)?,
            "connect_timeout" => self.connect_timeout = parse_timeout(value).map_err(wrong)?,
            "client_encoding" | "datestyle" => {}
            "service" => return Err(unimplemented("`service` (connection service files)")),
            k if UNIMPLEMENTED.contains(&k) => return Err(unimplemented(&format!("`{k}`"))),
            k if INERT.contains(&k) => {}
            _ => {
                self.runtime.push((key.into(), value.into()));
                return Ok(());
            }
        }
        let canonical = if key == "database" { "dbname" } else { key };
        self.set.push(canonical.to_string());
        if key == "client_encoding" && !is_utf8(value) {
            return Err(format!(
                "pq: unsupported client_encoding \"{value}\": must be absent or \"UTF8\""
            ));
        }
        if key == "datestyle" && value != "ISO, MDY" {
            return Err(format!(
                "pq: unsupported datestyle \"{value}\": must be absent or \"ISO, MDY\""
            ));
        }
        Ok(())
    }

    /// What `newConfig` decides once every source is read.
    fn finish(&mut self, env: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
        if !self.isset("user") {
            self.user = env("USER")
                .filter(|u| !u.is_empty())
                .or_else(os_user)
                .ok_or("pq: could not detect default username; please provide one explicitly")?;
        }
        if self.host.starts_with('@') {
            return Err(unimplemented("abstract Unix sockets"));
        }
        // SSL is neither necessary nor supported over a Unix socket.
        if self.unix_socket().is_some() {
            self.sslmode = SslMode::Disable;
            self.refused = None;
        }
        if self.sslrootcert.as_deref() == Some("system") {
            if !self.isset("sslmode") {
                self.sslmode = SslMode::VerifyFull;
            }
            if self.sslmode != SslMode::VerifyFull {
                return Err(format!(
                    "pq: weak sslmode \"{}\" may not be used with sslrootcert=system (use \"verify-full\")",
                    self.sslmode.name()
                ));
            }
        }
        Ok(())
    }

    /// lib/pq v1.10.9 knew four modes, and refused any other once connected.
    fn legacy_sslmode(&mut self, value: &str) {
        self.refused = None;
        match parse_sslmode(value) {
            Ok(mode) if !matches!(mode, SslMode::Allow | SslMode::Prefer) => self.sslmode = mode,
            _ => {
                self.refused = Some(format!(
                    "pq: unsupported sslmode \"{value}\"; only \"require\" (default), \"verify-full\", \"verify-ca\", and \"disable\" supported"
                ))
            }
        }
    }

    /// The socket's path when `host` is a directory (an absolute path).
    pub fn unix_socket(&self) -> Option<String> {
        self.host
            .starts_with('/')
            .then(|| format!("{}/.s.PGSQL.{}", self.host.trim_end_matches('/'), self.port))
    }
}

/// What lib/pq's `convertURL` makes of the URL: user, password, host, port, the path as `dbname`,
/// then every query parameter's first value, empty values left out; as `key='value'` words sorted
/// and read in that order, so that of two settings of one key the later word wins (`database`, an
/// old alias of `dbname`, is read last).
fn url_settings(url: &GoUrl, query: &[(String, String)]) -> Vec<(String, String)> {
    let mut settings = Vec::new();
    if let Some(user) = &url.user {
        settings.push(("user".to_string(), user.clone()));
    }
    if let Some(password) = &url.password {
        settings.push(("password".to_string(), password.clone()));
    }
    match split_host_port(&url.host) {
        Some((host, port)) => {
            settings.push(("host".to_string(), host.to_string()));
            settings.push(("port".to_string(), port.to_string()));
        }
        None => settings.push(("host".to_string(), url.host.clone())),
    }
    if let Some(dbname) = url.path.strip_prefix('/') {
        settings.push(("dbname".to_string(), dbname.to_string()));
    }
    let mut seen = Vec::new();
    for (key, value) in query {
        if !seen.contains(key) {
            seen.push(key.clone());
            settings.push((key.clone(), value.clone()));
        }
    }
    settings.retain(|(_, value)| !value.is_empty());
    let word = |(k, v): &(String, String)| {
        format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
    };
    settings.sort_by_key(word);
    settings.sort_by_key(|(k, _)| k == "database");
    // Only the last setting of a key counts.
    let mut last: Vec<(String, String)> = Vec::new();
    for (key, value) in settings {
        last.retain(|(k, _)| *k != key);
        last.push((key, value));
    }
    last
}

/// Go's `net.SplitHostPort`, for what it accepts here.
fn split_host_port(hostport: &str) -> Option<(&str, &str)> {
    if let Some(rest) = hostport.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return Some((host, after.strip_prefix(':')?));
    }
    let (host, port) = hostport.rsplit_once(':')?;
    (!host.contains(':')).then_some((host, port))
}

fn unimplemented(what: &str) -> String {
    format!("the pulumi stand-in does not implement lib/pq's {what}")
}

fn parse_sslmode(value: &str) -> Result<SslMode, String> {
    SslMode::NAMES
        .iter()
        .find(|(name, _)| *name == value)
        .map(|(_, mode)| *mode)
        .ok_or_else(|| {
            let names: Vec<&str> = SslMode::NAMES.iter().map(|(n, _)| *n).collect();
            format!(
                "\"{value}\" is not supported; supported values are {}, or {}",
                names[..names.len() - 1].join(", "),
                names[names.len() - 1]
            )
        })
}

fn parse_port(value: &str) -> Result<u16, String> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "strconv.ParseUint: parsing \"{value}\": invalid syntax"
        ));
    }
    value
        .parse()
        .map_err(|_| format!("strconv.ParseUint: parsing \"{value}\": value out of range"))
}

fn parse_timeout(value: &str) -> Result<Option<Duration>, String> {
    let seconds: i64 = value
        .parse()
        .map_err(|_| format!("strconv.ParseInt: parsing \"{value}\": invalid syntax"))?;
    Ok((seconds > 0).then(|| Duration::from_secs(seconds as u64)))
}

/// lib/pq's `ParseBool`: Go's, plus `yes`/`no` and `on`/`off`.
fn parse_bool(value: &str) -> Result<bool, String> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" | "yes" | "on" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" | "no" | "off" => Ok(false),
        _ => Err(format!(
            "strconv.ParseBool: parsing \"{value}\": invalid syntax"
        )),
    }
}

/// PostgreSQL's names for UTF-8 (`utf8`, `UTF-8`, `unicode`, in any case).
fn is_utf8(name: &str) -> bool {
    let plain: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect::<String>()
        .to_ascii_lowercase();
    plain == "utf8" || plain == "unicode"
}

/// The user this process runs as (Go's `user.Current`).
fn os_user() -> Option<String> {
    // SAFETY: getpwuid returns a pointer into static storage, read at once; the stand-in is
    // single-threaded here.
    unsafe {
        let entry = libc::getpwuid(libc::geteuid());
        if entry.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr((*entry).pw_name);
        Some(name.to_string_lossy().into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(url: &str, env: &[(&str, &str)]) -> Result<ConnInfo, String> {
        let url = GoUrl::parse(url).unwrap();
        let query = url.query();
        let env = |k: &str| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        ConnInfo::new(&url, &query, &env)
    }

    #[test]
    fn the_url_overrides_the_environment_which_overrides_the_defaults() {
        let env = [
            ("PGHOST", "db"),
            ("PGUSER", "envuser"),
            ("PGPASSWORD", "pw"),
        ];
        let got = info(
            "postgres://alice@127.0.0.1:6543/ledger?sslmode=disable",
            &env,
        )
        .unwrap();
        assert_eq!((got.host.as_str(), got.port), ("127.0.0.1", 6543));
        assert_eq!((got.user.as_str(), got.password.as_str()), ("alice", "pw"));
        assert_eq!(got.dbname.as_deref(), Some("ledger"));
        assert_eq!(got.sslmode, SslMode::Disable);
        let bare = info("postgres://", &env).unwrap();
        assert_eq!(
            (bare.host.as_str(), bare.port, bare.user.as_str()),
            ("db", 5432, "envuser")
        );
        assert_eq!(bare.sslmode, SslMode::Default);
        let socket = info("postgres://u@/db?host=/run/pg&sslmode=require", &[]).unwrap();
        assert_eq!(
            socket.unix_socket().as_deref(),
            Some("/run/pg/.s.PGSQL.5432")
        );
        assert_eq!(socket.sslmode, SslMode::Disable);
        let runtime = info("postgres://h/db?search_path=x&table_x=1", &[]).unwrap();
        assert_eq!(runtime.runtime.len(), 2);
    }

    #[test]
    fn wrong_values_are_refused_in_lib_pqs_words() {
        let e = info("postgres://h/db?sslmode=bogus", &[]).err().unwrap();
        assert_eq!(
            e,
            "pq: wrong value for \"sslmode\": \"bogus\" is not supported; supported values are disable, allow, prefer, require, verify-full, or verify-ca"
        );
        let e = info("postgres://h/db", &[("PGSSLMODE", "x")])
            .err()
            .unwrap();
        assert!(
            e.starts_with("pq: wrong value for $PGSSLMODE: \"x\" is not supported"),
            "{e}"
        );
        let e = info("postgres://h/db", &[("PGREQUIRESSL", "1")])
            .err()
            .unwrap();
        assert_eq!(e, "pq: environment variable $PGREQUIRESSL is not supported");
        let e = info("postgres://h/db?sslrootcert=system&sslmode=require", &[])
            .err()
            .unwrap();
        assert!(e.contains("weak sslmode \"require\""), "{e}");
        assert!(info("postgres://h/db?sslsni=maybe", &[]).is_err());
        assert!(info("postgres://h/db?target_session_attrs=any", &[]).is_err());
    }
}
