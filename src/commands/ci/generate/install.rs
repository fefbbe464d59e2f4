//! `ci generate --install VERSION [--install-from URL]`: every job puts that release of mara on
//! its runner before anything else (docs/install.md, "In a pipeline"). From a release's archive
//! (`--install-from`, a URL template with `{version}` and `{target}`: GitHub's releases, a
//! team's mirror), its SHA-256 file fetched beside it and checked before the archive is opened;
//! else with `cargo install --locked` from crates.io. One shell line, run as the setup is (in
//! the setup's place, before it), so what GitHub hands from step to step and what GitLab's jobs
//! unset before their setup hold for it too.

use crate::error::{Error, Problem, Result};

/// The package crates.io has mara in (docs/install.md).
const PACKAGE: &str = "mara-iac";

/// What every job installs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Install {
    /// A release's version, `0.1.0` (no `v`).
    pub version: String,
    /// The archive's URL, `{version}` and `{target}` in it, or crates.io when none.
    pub from: Option<String>,
}

impl Install {
    /// `--install` and `--install-from` as given: a version of digits and dots (a pre-release
    /// after `-`), and a URL that can be written between double quotes in a shell line.
    pub fn asked(version: Option<String>, from: Option<String>) -> Result<Option<Install>> {
        let Some(version) = version else {
            return match from {
                Some(_) => Err(usage(
                    "--install-from names where `--install VERSION` fetches mara from, and no --install was given",
                    "give the version too: `--install 0.1.0 --install-from URL`",
                )),
                None => Ok(None),
            };
        };
        let (release, pre) = version.split_once('-').unwrap_or((&version, ""));
        let numbers = release.split('.').collect::<Vec<_>>();
        // As cargo reads a version: no leading zero (`00.1.0` is refused there).
        let number = |n: &&str| {
            let digits = !n.is_empty() && n.chars().all(|c| c.is_ascii_digit());
            digits && (n.len() == 1 || !n.starts_with('0'))
        };
        let version_ok = numbers.len() == 3
            && numbers.iter().all(number)
            && pre.chars().all(|c| c.is_ascii_alphanumeric() || c == '.');
        if !version_ok {
            return Err(usage(
                &format!(
                    "--install {version}: a release's version is MAJOR.MINOR.PATCH, `0.1.0` (no `v`)"
                ),
                "`mara --version` says the one you run",
            ));
        }
        if let Some(url) = &from {
            url_refused(url)?;
        }
        Ok(Some(Install { version, from }))
    }

    /// The shell line that installs it and puts it first on `PATH`.
    pub fn line(&self) -> String {
        let version = &self.version;
        // A directory of the job's own: jobs side by side on one machine must not unpack over
        // a binary another is running.
        let dir = "mara_d=\"$(mktemp -d)\"".to_string();
        let Some(template) = &self.from else {
            return format!(
                "{dir} && cargo install --locked --quiet --root \"$mara_d\" --version ={version} {PACKAGE} && export PATH=\"$mara_d/bin:$PATH\" && mara --version"
            );
        };
        let url = template
            .replace("{version}", version)
            .replace("{target}", "$mara_t");
        [
            "case \"$(uname -m)\" in x86_64|amd64) mara_t=x86_64-unknown-linux-gnu ;; aarch64|arm64) mara_t=aarch64-unknown-linux-gnu ;; *) echo \"mara has no release binary for $(uname -m)\" >&2; false ;; esac".to_string(),
            dir,
            format!("mara_a=\"mara-{version}-$mara_t.tar.gz\""),
            format!("curl -fsSL -o \"$mara_d/$mara_a\" \"{url}\""),
            format!("curl -fsSL -o \"$mara_d/$mara_a.sha256\" \"{url}.sha256\""),
            "(cd \"$mara_d\" && sha256sum -c \"$mara_a.sha256\")".to_string(),
            format!("tar -xzf \"$mara_d/$mara_a\" -C \"$mara_d\" --strip-components=1 \"mara-{version}-$mara_t/mara\""),
            "export PATH=\"$mara_d:$PATH\"".to_string(),
            "mara --version".to_string(),
        ]
        .join(" && ")
    }

    /// What the file's header says the jobs do.
    pub fn said(&self) -> String {
        match &self.from {
            Some(url) => format!(
                "each job installs mara {} from {url}\n# (its .sha256 beside it checked first; a Linux binary, x86_64 or aarch64, glibc 2.35 or newer)",
                self.version
            ),
            None => format!(
                "each job installs mara {} with `cargo install --locked {PACKAGE}` (cargo on the runners)",
                self.version
            ),
        }
    }

    /// Its flags and their values, for the header's command (which quotes them).
    pub fn flags(&self) -> Vec<(&'static str, &str)> {
        let mut flags = vec![("--install", self.version.as_str())];
        if let Some(url) = &self.from {
            flags.push(("--install-from", url.as_str()));
        }
        flags
    }
}

/// A URL mara can write between double quotes in a shell line and in YAML: http or https, and
/// none of the characters a shell or the file would read.
fn url_refused(url: &str) -> Result<()> {
    placeholders_refused(url)?;
    let scheme = url.starts_with("https://") || url.starts_with("http://");
    let bad = url
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || "\"'`$\\".contains(*c));
    match (scheme, bad) {
        (true, None) => Ok(()),
        (false, _) => Err(usage(
            &format!("--install-from {url}: the archive's URL is http:// or https://"),
            "a release's archives: https://github.com/OWNER/REPO/releases/download/v{version}/mara-{version}-{target}.tar.gz",
        )),
        (true, Some(c)) => Err(usage(
            &format!(
                "--install-from: the URL holds {}, which the jobs' shell would read",
                named(c)
            ),
            "percent-encode it in the URL",
        )),
    }
}

/// A character as a message names it.
fn named(c: char) -> String {
    match c {
        ' ' => "a space".to_string(),
        '"' | '\'' => "a quote".to_string(),
        c if c.is_whitespace() || c.is_control() => format!("`{}`", c.escape_default()),
        c => format!("`{c}`"),
    }
}

/// `{version}` and `{target}` are what the URL may hold in braces, and `{target}` it must: each
/// runner fetches its own machine's archive.
fn placeholders_refused(url: &str) -> Result<()> {
    let mut rest = url;
    while let Some(open) = rest.find('{') {
        let name = rest[open + 1..].split('}').next().unwrap_or_default();
        if name != "version" && name != "target" {
            return Err(usage(
                &format!("--install-from: `{{{name}}}` is not a placeholder mara fills in"),
                "the URL may hold {version} and {target}",
            ));
        }
        rest = &rest[open + 1..];
    }
    match url.contains("{target}") {
        true => Ok(()),
        false => Err(usage(
            "--install-from: the URL has no {target}: every runner, x86_64 or aarch64, would fetch the same archive",
            "name the archive by its target: …/mara-{version}-{target}.tar.gz",
        )),
    }
}

fn usage(message: &str, hint: &str) -> Error {
    Error::usage(Problem::new(message).hint(hint))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_archive_is_fetched_checked_then_opened() {
        let install = Install::asked(
            Some("0.2.0".into()),
            Some("https://mirror.example/mara/{version}/mara-{version}-{target}.tar.gz".into()),
        )
        .unwrap()
        .unwrap();
        let line = install.line();
        let at = |needle: &str| {
            line.find(needle)
                .unwrap_or_else(|| panic!("{needle}: {line}"))
        };
        assert!(
            at(
                "curl -fsSL -o \"$mara_d/$mara_a\" \"https://mirror.example/mara/0.2.0/mara-0.2.0-$mara_t.tar.gz\""
            ) < at("sha256sum -c")
        );
        assert!(at("sha256sum -c") < at("tar -xzf"));
        assert!(at("tar -xzf") < at("export PATH=\"$mara_d:$PATH\""));
        assert!(!line.contains('\n'));
        assert_eq!(
            install.flags(),
            [
                ("--install", "0.2.0"),
                (
                    "--install-from",
                    "https://mirror.example/mara/{version}/mara-{version}-{target}.tar.gz"
                )
            ]
        );
        let cargo = Install::asked(Some("0.2.0".into()), None).unwrap().unwrap();
        assert!(cargo.line().contains(
            "cargo install --locked --quiet --root \"$mara_d\" --version =0.2.0 mara-iac"
        ));
    }

    #[test]
    fn a_version_or_url_the_jobs_could_not_use_is_refused() {
        let refused = |version: Option<&str>, from: Option<&str>| {
            Install::asked(version.map(String::from), from.map(String::from))
                .unwrap_err()
                .to_string()
        };
        assert!(refused(Some("v0.1.0"), None).contains("MAJOR.MINOR.PATCH"));
        assert!(refused(Some("0.1"), None).contains("MAJOR.MINOR.PATCH"));
        assert!(refused(Some("0.1.0;rm"), None).contains("MAJOR.MINOR.PATCH"));
        assert!(refused(None, Some("https://x")).contains("no --install was given"));
        assert!(refused(Some("0.1.0"), Some("ftp://x/{target}")).contains("http:// or https://"));
        let url = |tail: &str| format!("https://x/{{target}}/{tail}");
        assert!(refused(Some("0.1.0"), Some(&url("$(id)"))).contains("holds `$`"));
        assert!(refused(Some("0.1.0"), Some(&url("a b"))).contains("holds a space"));
        assert!(refused(Some("0.1.0"), Some(&url("\"x"))).contains("holds a quote"));
        let braces = refused(Some("0.1.0"), Some("https://x/{Version}/{target}"));
        assert!(
            braces.contains("`{Version}` is not a placeholder"),
            "{braces}"
        );
        assert!(refused(Some("0.1.0"), Some("https://x/mara.tar.gz")).contains("has no {target}"));
        assert!(refused(Some("00.1.0"), None).contains("MAJOR.MINOR.PATCH"));
        assert!(Install::asked(Some("1.2.3-rc.1".into()), None).is_ok());
        assert_eq!(Install::asked(None, None).unwrap(), None);
    }
}
