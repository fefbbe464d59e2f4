//! A `postgres://` URL as Go's `net/url` reads it (Pulumi parses the backend URL with it, then
//! lib/pq again): `scheme://[user[:password]@]host[:port][/path][?query]`, user, password and path
//! percent-decoded, the query as `url.Values` (`+` is a space, a pair with `;` or a bad escape is
//! dropped, the first value of a key is the one read).

use crate::Failure;

pub struct GoUrl {
    pub user: Option<String>,
    pub password: Option<String>,
    /// `host[:port]` as written (`u.Host`).
    pub host: String,
    /// The decoded path (`u.Path`), with its leading `/`.
    pub path: String,
    pub raw_query: String,
}

impl GoUrl {
    pub fn parse(original: &str) -> Result<GoUrl, Failure> {
        let invalid = |why: String| {
            Failure::new(1, format!("parse {}: {why}", go_quote(&redacted(original))))
        };
        let rest = original.split('#').next().unwrap_or_default();
        let (rest, raw_query) = rest.split_once('?').unwrap_or((rest, ""));
        let rest = rest
            .strip_prefix("postgres://")
            .ok_or_else(|| invalid("not a postgres:// URL".into()))?;
        let (authority, raw_path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (userinfo, host) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        if let Some((_, port)) = host.rsplit_once(':').filter(|_| !host.ends_with(']'))
            && !port.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(invalid(format!(
                "invalid port {} after host",
                go_quote(&format!(":{port}"))
            )));
        }
        let decode = |s: &str| {
            unescape(s, false).ok_or_else(|| invalid(format!("invalid URL escape {}", go_quote(s))))
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(info) => match info.split_once(':') {
                Some((u, p)) => (Some(decode(u)?), Some(decode(p)?)),
                None => (Some(decode(info)?), None),
            },
        };
        Ok(GoUrl {
            user,
            password,
            host: host.to_string(),
            path: decode(raw_path)?,
            raw_query: raw_query.to_string(),
        })
    }

    /// `u.Query()`: the pairs in order (a key may repeat).
    pub fn query(&self) -> Vec<(String, String)> {
        self.raw_query
            .split('&')
            .filter(|pair| !pair.is_empty() && !pair.contains(';'))
            .filter_map(|pair| {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                Some((unescape(key, true)?, unescape(value, true)?))
            })
            .collect()
    }

    /// How Pulumi's DIY backend names an object of the bucket in an error (`lockURLForError`): the
    /// URL with its user and password as `****:****`, the key joined to its path, its query kept.
    pub fn locator(&self, key: &str) -> String {
        let userinfo = if self.user.is_some() {
            "****:****@"
        } else {
            ""
        };
        let joined = format!("{}/{key}", self.path.trim_end_matches('/'));
        let path = if joined.starts_with('/') {
            joined
        } else {
            format!("/{joined}")
        };
        let query = if self.raw_query.is_empty() {
            String::new()
        } else {
            format!("?{}", self.raw_query)
        };
        format!(
            "postgres://{userinfo}{}{}{query}",
            self.host,
            escape_path(&path)
        )
    }
}

/// The URL as written with its password, if any, as `xxxxx` (Go's `URL.Redacted`).
pub fn redacted(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    let authority = &url[start..end];
    let Some(at) = authority.rfind('@') else {
        return url.to_string();
    };
    match authority[..at].split_once(':') {
        Some((user, _)) => format!("{}{user}:xxxxx{}", &url[..start], &url[start + at..]),
        None => url.to_string(),
    }
}

/// Go's `%q` of a string: quoted, with `"`, `\` and control characters escaped.
pub fn go_quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\x7f' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Percent-decoding; `+` is a space in a query (`plus`). `None` on a malformed escape.
fn unescape(text: &str, plus: bool) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' if plus => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// A path as Go's `URL.EscapedPath` writes it (the characters a path may hold are kept).
fn escape_path(path: &str) -> String {
    let mut out = String::new();
    for b in path.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => out.push(b as char),
            b'-' | b'_' | b'.' | b'~' | b'/' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*'
            | b'+' | b',' | b';' | b'=' | b':' | b'@' => out.push(b as char),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_reads_as_go_reads_it() {
        let url = GoUrl::parse("postgres://al%40ce:p%2Fw@127.0.0.1:5432/my%20db?sslmode=disable&table=t&x=a+b&bad=%zz&semi=1;2").unwrap();
        assert_eq!(url.user.as_deref(), Some("al@ce"));
        assert_eq!(url.password.as_deref(), Some("p/w"));
        assert_eq!(url.host, "127.0.0.1:5432");
        assert_eq!(url.path, "/my db");
        let query = url.query();
        assert_eq!(
            query,
            vec![
                ("sslmode".to_string(), "disable".to_string()),
                ("table".to_string(), "t".to_string()),
                ("x".to_string(), "a b".to_string()),
            ]
        );
        assert!(GoUrl::parse("postgres://h:5x/db").is_err());
        assert_eq!(GoUrl::parse("postgres://").unwrap().path, "");
    }

    #[test]
    fn messages_never_show_the_password() {
        assert_eq!(
            redacted("postgres://u:secret@h:1/db?sslmode=disable"),
            "postgres://u:xxxxx@h:1/db?sslmode=disable"
        );
        assert_eq!(redacted("postgres://u@h/db"), "postgres://u@h/db");
        let url = GoUrl::parse("postgres://u:secret@h:1/db?sslmode=disable&table=t").unwrap();
        assert_eq!(
            url.locator(".pulumi/locks/organization/p/dev/x.json"),
            "postgres://****:****@h:1/db/.pulumi/locks/organization/p/dev/x.json?sslmode=disable&table=t"
        );
        let bare = GoUrl::parse("postgres://h").unwrap();
        assert_eq!(bare.locator(".pulumi/x"), "postgres://h/.pulumi/x");
    }
}
