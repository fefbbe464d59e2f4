//! A ledger server's URL (docs/formats.md, `ledger`; docs/commands.md, "A team's ledger"): read,
//! and shown without its password whatever form the password was given in.

/// The URL parameters the client reads.
const KNOWN: &[&str] = &[
    "user",
    "password",
    "dbname",
    "host",
    "hostaddr",
    "port",
    "sslmode",
    "application_name",
    "options",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

/// The connection settings of a ledger URL. Only a `postgres://` or `postgresql://` URL is
/// taken (not libpq's `key=value` form). libpq's `sslmode=verify-ca` and `verify-full` are read
/// as `require`: mara always verifies a server's certificate (docs/decisions.md).
pub fn parse(url: &str) -> Result<tokio_postgres::Config, String> {
    let url = url.trim();
    if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
        return Err(
            "not a PostgreSQL URL: it must start with `postgres://` (`postgres://user@host:5432/database`)"
                .into(),
        );
    }
    if let Some((_, query)) = url.split_once('?') {
        for key in query.split('&').filter_map(|p| p.split('=').next()) {
            if !KNOWN.contains(&key) {
                let instead = match key {
                    "sslrootcert" => ": point SSL_CERT_FILE at the CA certificate instead",
                    "sslcert" | "sslkey" | "sslpassword" => {
                        ": client certificates are not supported"
                    }
                    _ => "",
                };
                return Err(format!(
                    "the URL's parameter `{key}` is not one mara takes{instead} (it takes {})",
                    KNOWN.join(", ")
                ));
            }
        }
    }
    let url = match url.split_once('?') {
        Some((base, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some(("sslmode", "verify-ca" | "verify-full")) => "sslmode=require".into(),
                    _ => pair.to_string(),
                })
                .collect();
            format!("{base}?{}", query.join("&"))
        }
        None => url.to_string(),
    };
    url.parse::<tokio_postgres::Config>().map_err(|e| {
        let mut text = format!("not a PostgreSQL URL: {e}");
        if url.contains("sslmode=") {
            text.push_str(
                " (`sslmode` is one of disable, prefer, require, verify-ca, verify-full)",
            );
        }
        text
    })
}

/// The URL as it may be shown: rebuilt from what it says (user, hosts, ports, database, TLS
/// mode), so that no password shows, whether it was in the user part, a query parameter or a
/// part the parser reads differently from a person. A URL that cannot be read shows as its
/// scheme alone.
pub fn shown(url: &str) -> String {
    let Ok(config) = parse(url) else {
        let scheme = url.trim().split("://").next().filter(|s| {
            !s.is_empty() && s.len() < 20 && s.chars().all(|c| c.is_ascii_alphanumeric())
        });
        return match scheme {
            Some(scheme) if url.contains("://") => format!("{scheme}://… (unreadable)"),
            _ => "(an unreadable URL)".into(),
        };
    };
    let mut out = String::from("postgres://");
    if let Some(user) = config.get_user() {
        out.push_str(user);
        out.push('@');
    }
    let ports = config.get_ports();
    let mut sockets = Vec::new();
    let mut hosts = Vec::new();
    for (i, host) in config.get_hosts().iter().enumerate() {
        let port = ports.get(i).or(ports.first());
        match host {
            tokio_postgres::config::Host::Tcp(name) => {
                let name = match name.contains(':') {
                    true => format!("[{name}]"),
                    false => name.clone(),
                };
                hosts.push(match port {
                    Some(port) => format!("{name}:{port}"),
                    None => name,
                });
            }
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(path) => sockets.push(path.display().to_string()),
        }
    }
    out.push_str(&hosts.join(","));
    out.push('/');
    out.push_str(config.get_dbname().unwrap_or_default());
    let mut query = Vec::new();
    for socket in sockets {
        query.push(format!("host={socket}"));
    }
    // A port for sockets alone goes in the query.
    if hosts.is_empty()
        && !query.is_empty()
        && let Some(port) = ports.first()
    {
        query.push(format!("port={port}"));
    }
    // The mode as given (`verify-full` is read as `require`, but shown as written).
    if let Some(mode) = url
        .split_once('?')
        .into_iter()
        .flat_map(|(_, q)| q.split('&'))
        .find_map(|p| p.strip_prefix("sslmode="))
        .filter(|m| *m != "prefer")
    {
        query.push(format!("sslmode={mode}"));
    }
    if !query.is_empty() {
        out.push('?');
        out.push_str(&query.join("&"));
    }
    out
}

/// The URL as the engines' PostgreSQL driver (Go's `lib/pq`, for Pulumi's `postgres://` backend
/// and Terraform's `pg`) takes it, for `state = "ledger"`: the user, host, port and database of
/// the ledger's, no password (the engines get it in `PGPASSWORD`), and a TLS mode `lib/pq` knows
/// that is what mara does — `verify-full` where mara's connection is TLS (`over_tls`: mara
/// always verifies the server's certificate and name, against the system's roots, and `lib/pq`
/// does so in `verify-full`, `SSL_CERT_FILE` included), else `disable` (`lib/pq` refuses
/// `prefer`, and takes no `sslmode` as `require`). Several hosts are refused: `lib/pq` takes one.
pub fn for_engines(url: &str, over_tls: bool) -> Result<String, String> {
    let config = parse(url)?;
    let hosts = config.get_hosts();
    if hosts.len() > 1 {
        return Err(format!(
            "names {} hosts, and the engines' PostgreSQL driver (lib/pq) takes one: `state = \"ledger\"` needs a ledger URL with a single host",
            hosts.len()
        ));
    }
    let encode = |text: &str| -> String {
        text.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    let mut out = String::from("postgres://");
    if let Some(user) = config.get_user() {
        out.push_str(&encode(user));
        out.push('@');
    }
    let port = config.get_ports().first().copied();
    let mut query = Vec::new();
    match hosts.first() {
        Some(tokio_postgres::config::Host::Tcp(name)) => {
            match name.contains(':') {
                true => out.push_str(&format!("[{name}]")),
                false => out.push_str(&encode(name)),
            }
            if let Some(port) = port {
                out.push_str(&format!(":{port}"));
            }
        }
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(path)) => {
            query.push(format!("host={}", encode(&path.display().to_string())));
            query.extend(port.map(|port| format!("port={port}")));
        }
        None => {}
    }
    out.push('/');
    out.push_str(&encode(config.get_dbname().unwrap_or_default()));
    let tls = over_tls && !only_sockets(&config);
    query.push(format!(
        "sslmode={}",
        if tls { "verify-full" } else { "disable" }
    ));
    if let Some(timeout) = config.get_connect_timeout() {
        query.push(format!("connect_timeout={}", timeout.as_secs().max(1)));
    }
    Ok(format!("{out}?{}", query.join("&")))
}

/// Whether the URL holds a password, in any form.
pub fn has_password(url: &str) -> bool {
    parse(url).is_ok_and(|c| c.get_password().is_some())
}

/// Whether every host of the URL is a Unix socket (where mara uses no TLS, as libpq does not).
pub fn only_sockets(config: &tokio_postgres::Config) -> bool {
    let hosts = config.get_hosts();
    !hosts.is_empty()
        && hosts
            .iter()
            .all(|h| !matches!(h, tokio_postgres::config::Host::Tcp(_)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_engines_get_the_ledger_url_without_its_password_and_with_a_tls_mode_lib_pq_knows() {
        let url = "postgres://mara:s3cr%40t@db.example:6432/team?sslmode=prefer&application_name=x";
        assert_eq!(
            super::for_engines(url, true).unwrap(),
            "postgres://mara@db.example:6432/team?sslmode=verify-full"
        );
        assert_eq!(
            super::for_engines(url, false).unwrap(),
            "postgres://mara@db.example:6432/team?sslmode=disable"
        );
        let socket = "postgres://mara@/team?host=/run/postgresql&sslmode=require";
        assert_eq!(
            super::for_engines(socket, true).unwrap(),
            "postgres://mara@/team?host=%2Frun%2Fpostgresql&sslmode=disable"
        );
        let timeout = "postgres://m@h/d?connect_timeout=7";
        assert!(
            super::for_engines(timeout, false)
                .unwrap()
                .ends_with("sslmode=disable&connect_timeout=7")
        );
        let err = super::for_engines("postgres://m@a:1,b:2/d", true).unwrap_err();
        assert!(err.contains("2 hosts"), "{err}");
    }

    use super::*;

    #[test]
    fn no_password_shows_in_any_form() {
        for (url, expected) in [
            (
                "postgres://mara:s3cret@db.example:5432/ledger?sslmode=require",
                "postgres://mara@db.example:5432/ledger?sslmode=require",
            ),
            (
                "postgres://slash:ab/cd+ef==@127.0.0.1:55432/mara2",
                "postgres://slash@127.0.0.1:55432/mara2",
            ),
            (
                "postgres://db.example/mara?user=mara&password=S3cretPassw0rd",
                "postgres://mara@db.example:5432/mara",
            ),
            ("postgresql://u:p%40ss@h/d", "postgres://u@h:5432/d"),
            (
                "postgres://m@/mara?host=/tmp/pg&port=5433",
                "postgres://m@/mara?host=/tmp/pg&port=5433",
            ),
            (
                "postgres://m@a:1,b:2/x?sslmode=verify-full",
                "postgres://m@a:1,b:2/x?sslmode=verify-full",
            ),
        ] {
            assert_eq!(shown(url), expected, "{url}");
        }
        for url in [
            "host=h user=mara password=S3cret dbname=mara",
            "postgres://u:S3cret@h:notaport/d",
            "S3cret",
        ] {
            assert!(!shown(url).contains("S3cret"), "{url}: {}", shown(url));
        }
    }

    #[test]
    fn passwords_are_found_wherever_they_are() {
        assert!(has_password("postgres://a:b@h/d"));
        assert!(has_password(
            "postgres://slash:ab/cd+ef==@127.0.0.1:55432/m"
        ));
        assert!(has_password("postgres://h/d?password=x"));
        assert!(!has_password("postgres://a@h/d"));
    }

    #[test]
    fn only_urls_are_taken() {
        assert!(
            parse("host=h dbname=d")
                .unwrap_err()
                .contains("postgres://")
        );
        assert!(parse("mysql://h/d").is_err());
        assert!(
            parse("postgres://h/d?sslmode=bogus")
                .unwrap_err()
                .contains("verify-full")
        );
        assert_eq!(
            parse("postgres://h/d?sslmode=verify-ca")
                .unwrap()
                .get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        assert!(
            parse("postgres://h/d?sslrootcert=/ca.pem")
                .unwrap_err()
                .contains("SSL_CERT_FILE")
        );
        assert!(only_sockets(&parse("postgres://u@/d?host=/tmp").unwrap()));
        assert!(!only_sockets(&parse("postgres://u@h/d").unwrap()));
    }
}
