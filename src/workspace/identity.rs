//! Which workspace this is, in words every copy of it says alike (docs/formats.md, "mara.toml";
//! docs/decisions.md, "Kubeconfig ownership travels with the kubeconfig (issue 42)"): what the
//! entries mara merges into a user's kubeconfig are marked with, so that a second clone, a
//! cleaned workspace or a CI runner whose home persists recognises them as its own.
//!
//! In order: mara.toml's `id`; else the git repository's `remote.origin.url`, normalized (no
//! scheme, credentials, port, query, `.git` suffix or trailing slash; scp-like `git@host:g/p`
//! read as `host/g/p`; the host lower-cased), joined by `//` with the workspace's path inside the
//! repository when it is not the repository's root; else the workspace root's absolute path,
//! which only that directory shares. A copy answers to every one of these it has (`aliases`),
//! so that entries marked before an `id` was set, or a remote added, stay its own.
//!
//! The remote is read from `.git/config` (a `.git` file of a worktree or submodule followed to
//! its git directory, and a worktree's `commondir` to the config it shares); git itself is not
//! run. A token in the URL (`https://gitlab-ci-token:TOKEN@host/g/p.git`) is never kept.

use std::fmt;
use std::path::{Path, PathBuf};

/// A workspace's identity: the name mara marks its entries with, and every name it answers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// What mara writes: the first of the `id`, the remote, the directory.
    pub name: String,
    /// Where `name` comes from.
    pub source: Source,
    /// The other names this copy answers to (its remote, its directory), `name` not among them.
    pub aliases: Vec<String>,
}

/// Where a workspace's identity comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// mara.toml's `id`: every copy of the repository shares it.
    Configured,
    /// The git repository's `origin` remote and the workspace's path inside it.
    Remote,
    /// The workspace root's absolute path: only this directory has it.
    Directory,
}

impl Identity {
    /// An identity of one name and no alias (tests, and what a caller already knows).
    pub fn named(name: &str, source: Source) -> Identity {
        Identity {
            name: name.to_string(),
            source,
            aliases: Vec::new(),
        }
    }

    /// Whether `name` is this workspace's, by its identity or one of its aliases.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.iter().any(|a| a == name)
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// The identity of the workspace at `root` whose mara.toml says `configured` (its `id`), or why
/// it cannot be known: a `.git` file or git configuration that cannot be read, named.
pub fn identify(root: &Path, configured: Option<&str>) -> Result<Identity, String> {
    let real = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let remote = match repository_of(&real)? {
        Some(repository) => repository.remote_identity(&real)?,
        None => None,
    };
    let mut names: Vec<(String, Source)> = Vec::new();
    if let Some(id) = configured {
        names.push((id.to_string(), Source::Configured));
    }
    if let Some(remote) = remote {
        names.push((remote, Source::Remote));
    }
    names.push((real.display().to_string(), Source::Directory));
    let (name, source) = names.remove(0);
    let mut aliases: Vec<String> = names.into_iter().map(|(n, _)| n).collect();
    aliases.retain(|a| *a != name);
    aliases.dedup();
    Ok(Identity {
        name,
        source,
        aliases,
    })
}

/// A git repository: its work tree, and the configuration file its remotes are in.
#[derive(Debug, PartialEq)]
struct Repository {
    work_tree: PathBuf,
    config: PathBuf,
}

impl Repository {
    /// Its `origin` remote, normalized, with the path of `dir` inside its work tree after `//`
    /// (none when `dir` is its root); `None` without an `origin` remote.
    fn remote_identity(&self, dir: &Path) -> Result<Option<String>, String> {
        let text = match super::read_input(&self.config) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", self.config.display())),
        };
        let Some(remote) = origin_url(&text).as_deref().and_then(normalize_remote) else {
            return Ok(None);
        };
        let inside: Vec<String> = dir
            .strip_prefix(&self.work_tree)
            .unwrap_or(Path::new(""))
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        Ok(Some(match inside.is_empty() {
            true => remote,
            false => format!("{remote}//{}", inside.join("/")),
        }))
    }
}

/// The git repository `dir` is in, as git finds it: the nearest `.git` above, a directory or a
/// file (`gitdir: …`, a worktree's or a submodule's) leading to one; a worktree's `commondir`
/// leads to the configuration it shares with its repository.
fn repository_of(dir: &Path) -> Result<Option<Repository>, String> {
    let Some(work_tree) = dir.ancestors().find(|d| d.join(".git").exists()) else {
        return Ok(None);
    };
    let dot_git = work_tree.join(".git");
    let git_dir = match dot_git.is_dir() {
        true => dot_git,
        false => {
            let text = super::read_input(&dot_git)
                .map_err(|e| format!("cannot read {}: {e}", dot_git.display()))?;
            let target = text
                .lines()
                .find_map(|l| l.strip_prefix("gitdir:"))
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| {
                    format!(
                        "{}:1: a `.git` file says where the git directory is (`gitdir: PATH`), and this one does not",
                        dot_git.display()
                    )
                })?;
            work_tree.join(target)
        }
    };
    let commondir = git_dir.join("commondir");
    let common = match super::read_input(&commondir) {
        Ok(text) => git_dir.join(text.trim()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => git_dir,
        Err(e) => return Err(format!("cannot read {}: {e}", commondir.display())),
    };
    Ok(Some(Repository {
        work_tree: work_tree.to_path_buf(),
        config: common.join("config"),
    }))
}

/// The first `url` of `[remote "origin"]` (or the old `[remote.origin]`) in a git configuration,
/// as git reads the value: quotes removed, escapes taken, a comment after it left out.
fn origin_url(text: &str) -> Option<String> {
    let mut in_origin = false;
    for line in text.lines() {
        let mut rest = line.trim();
        if let Some(header) = rest.strip_prefix('[') {
            let Some(end) = header_end(header) else {
                in_origin = false;
                continue;
            };
            in_origin = is_origin(&header[..end]);
            rest = header[end + 1..].trim();
        }
        let Some((key, value)) = rest.split_once('=') else {
            continue;
        };
        if in_origin && key.trim().eq_ignore_ascii_case("url") {
            return Some(config_value(value)).filter(|v| !v.is_empty());
        }
    }
    None
}

/// Where a section header's `]` is: after its quoted subsection, if it has one.
fn header_end(header: &str) -> Option<usize> {
    let from = match header.find('"') {
        Some(open) => open + 1 + closing_quote(&header[open + 1..])? + 1,
        None => 0,
    };
    header[from..].find(']').map(|at| from + at)
}

/// The `"` that closes a quoted subsection (`\"` and `\\` escaped inside it).
fn closing_quote(text: &str) -> Option<usize> {
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return Some(at),
            _ => {}
        }
    }
    None
}

/// Whether a section header (between `[` and `]`) is the `origin` remote's.
fn is_origin(header: &str) -> bool {
    match header.split_once(char::is_whitespace) {
        Some((section, sub)) => {
            let sub = sub.trim();
            section.eq_ignore_ascii_case("remote")
                && sub.strip_prefix('"').and_then(|s| s.strip_suffix('"')) == Some("origin")
        }
        // `[remote.origin]`: the old form, whose subsection git lower-cases.
        None => header.eq_ignore_ascii_case("remote.origin"),
    }
}

/// A value as git reads it: unquoted, its escapes taken, a `#` or `;` outside quotes ending it.
fn config_value(raw: &str) -> String {
    let mut value = String::new();
    let (mut quoted, mut escaped) = (false, false);
    // The length of `value` without the spaces that end it outside quotes.
    let mut kept = 0;
    for c in raw.trim().chars() {
        match c {
            _ if escaped => {
                value.push(match c {
                    'n' => '\n',
                    't' => '\t',
                    other => other,
                });
                escaped = false;
            }
            '\\' => {
                escaped = true;
                continue;
            }
            '"' => quoted = !quoted,
            '#' | ';' if !quoted => break,
            _ => value.push(c),
        }
        if quoted || !c.is_whitespace() {
            kept = value.len();
        }
    }
    value.truncate(kept);
    value
}

/// A remote's URL as every clone of the repository says it, without anything secret: no scheme,
/// user, password or token, port, query or fragment; no `.git` suffix, no empty or trailing path
/// segment; the host lower-cased; an scp-like `git@host:g/p` read as `host/g/p`, and a local path
/// (`/srv/git/p.git`, `file:///srv/git/p.git`) as `/srv/git/p`. `None` when nothing is left.
pub fn normalize_remote(url: &str) -> Option<String> {
    // A token may ride in the query (`?private_token=…`): it and the fragment go first.
    let url = url.trim().split(['?', '#']).next().unwrap_or_default();
    let (host, path) = match url.split_once("://") {
        Some((scheme, rest))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) =>
        {
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            (host_of(authority), path)
        }
        _ => match scp_like(url) {
            Some((authority, path)) => (host_of(authority), path),
            None => (String::new(), url),
        },
    };
    let mut segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if let Some(last) = segments.last_mut() {
        *last = last.strip_suffix(".git").unwrap_or(last);
    }
    segments.retain(|s| !s.is_empty());
    let path = segments.join("/");
    let normalized = match host.is_empty() {
        true if path.is_empty() => return None,
        true if url.starts_with('/') || url.contains("://") => format!("/{path}"),
        true => path,
        false if path.is_empty() => host,
        false => format!("{host}/{path}"),
    };
    Some(normalized)
}

/// `[user@]host:path` as git reads it: a `:` before any `/` (and not a scheme's `://`).
fn scp_like(url: &str) -> Option<(&str, &str)> {
    let (authority, path) = url.split_once(':')?;
    (!authority.is_empty() && !authority.contains('/')).then_some((authority, path))
}

/// The host of an authority (`user:password@host:port`), lower-cased, without the user, password
/// or port.
fn host_of(authority: &str) -> String {
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host.strip_prefix('[') {
        // An IPv6 address: its brackets kept, its port not.
        Some(inner) => inner
            .split_once(']')
            .map_or(host.to_string(), |(ip, _)| format!("[{ip}]")),
        None => host.split(':').next().unwrap_or_default().to_string(),
    };
    host.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_a_remote_comes_to_one_name_without_its_credentials() {
        let same = [
            "https://gitlab-ci-token:SECRET@GitLab.Example.com/g/p.git",
            "https://gitlab-ci-token:SECRET@gitlab.example.com/g/p.git/",
            "https://oauth2:SECRET@gitlab.example.com:443/g/p",
            "http://gitlab.example.com/g/p/",
            "https://gitlab.example.com/g/p.git?private_token=SECRET",
            "https://gitlab.example.com/g/p#SECRET",
            "https://user:pa%2Fss%40SECRET@gitlab.example.com//g/p.git",
            "ssh://git@gitlab.example.com:2222/g/p.git",
            "git+ssh://git@gitlab.example.com/g/p",
            "git://gitlab.example.com/g/p.git",
            "git@gitlab.example.com:g/p.git",
            "git@GITLAB.example.com:/g/p.git/",
            "gitlab.example.com:g/p",
            "  git@gitlab.example.com:g/p.git  ",
        ];
        for url in same {
            let name = normalize_remote(url);
            assert_eq!(name.as_deref(), Some("gitlab.example.com/g/p"), "{url}");
        }
        // The path keeps its case, and its depth (GitLab's subgroups).
        assert_eq!(
            normalize_remote("https://github.com/Owner/Repo.git").as_deref(),
            Some("github.com/Owner/Repo")
        );
        assert_eq!(
            normalize_remote("https://gitlab.com/a/b/c/d.git").as_deref(),
            Some("gitlab.com/a/b/c/d")
        );
        // Local repositories: a path, however it is written.
        for url in [
            "/srv/git/p.git",
            "file:///srv/git/p.git",
            "/srv/git/p/.git/",
        ] {
            assert_eq!(
                normalize_remote(url).as_deref(),
                Some("/srv/git/p"),
                "{url}"
            );
        }
        assert_eq!(normalize_remote("../p.git").as_deref(), Some("../p"));
        assert_eq!(
            normalize_remote("ssh://git@[::1]:22/g/p").as_deref(),
            Some("[::1]/g/p")
        );
        assert_eq!(normalize_remote(""), None);
        assert_eq!(normalize_remote("https://"), None);
    }

    #[test]
    fn the_origin_url_is_read_as_git_reads_it() {
        let config = r#"
[core]
	repositoryformatversion = 0
	url = https://not-a-remote/core
[remote "upstream"]
	url = https://upstream.example/u/p.git
[Remote "origin"] # a comment
	fetch = +refs/heads/*:refs/remotes/origin/*
	URL = "https://gitlab-ci-token:SECRET@gitlab.example.com/g/p.git" ; the token
	url = https://second.example/ignored
[branch "main"]
	remote = origin
"#;
        assert_eq!(
            origin_url(config).as_deref(),
            Some("https://gitlab-ci-token:SECRET@gitlab.example.com/g/p.git")
        );
        assert_eq!(
            origin_url("[remote.origin]\nurl = git@h:g/p.git # note\n").as_deref(),
            Some("git@h:g/p.git")
        );
        assert_eq!(
            origin_url("[remote \"origin\"] url = h:a\\\"b\n").as_deref(),
            Some("h:a\"b")
        );
        assert_eq!(origin_url("[remote \"origin\"]\n\tfetch = x\n"), None);
        assert_eq!(origin_url("[remote \"Origin\"]\nurl = h:g/p\n"), None);
    }

    /// A repository at `dir` whose origin is `url` (none: no remote).
    fn repository(dir: &Path, url: Option<&str>) {
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        let mut config = "[core]\n\tbare = false\n".to_string();
        if let Some(url) = url {
            config.push_str(&format!("[remote \"origin\"]\n\turl = {url}\n"));
        }
        std::fs::write(dir.join(".git/config"), config).unwrap();
    }

    #[test]
    fn a_workspace_is_its_id_else_its_remote_and_path_else_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().canonicalize().unwrap().join("clone");
        repository(&repo, Some("https://ci:SECRET@Host.example/g/p.git"));
        let nested = repo.join("infra/platform");
        std::fs::create_dir_all(&nested).unwrap();

        let at_root = identify(&repo, None).unwrap();
        assert_eq!(at_root.name, "host.example/g/p");
        assert_eq!(at_root.source, Source::Remote);
        assert_eq!(at_root.aliases, [repo.display().to_string()]);
        let inside = identify(&nested, None).unwrap();
        assert_eq!(inside.name, "host.example/g/p//infra/platform");
        assert!(!format!("{inside:?}").contains("SECRET"));

        let configured = identify(&nested, Some("shop")).unwrap();
        assert_eq!(configured.name, "shop");
        assert_eq!(configured.source, Source::Configured);
        assert!(configured.answers_to("host.example/g/p//infra/platform"));
        assert!(configured.answers_to(&nested.display().to_string()));
        assert!(!configured.answers_to("host.example/g/p"));

        // No remote: the directory, which only this copy has.
        let alone = dir.path().canonicalize().unwrap().join("alone");
        repository(&alone, None);
        let fallback = identify(&alone, None).unwrap();
        assert_eq!(fallback.name, alone.display().to_string());
        assert_eq!(fallback.source, Source::Directory);
        assert!(fallback.aliases.is_empty());
        // And through a symlink, the directory it leads to.
        std::os::unix::fs::symlink(&alone, dir.path().join("link")).unwrap();
        assert_eq!(identify(&dir.path().join("link"), None).unwrap(), fallback);
    }

    #[test]
    fn a_worktree_shares_its_repository_s_remote() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().canonicalize().unwrap().join("main");
        repository(&main, Some("git@host.example:g/p.git"));
        // `git worktree add ../wt`: a `.git` file, a git directory with a `commondir`.
        let git_dir = main.join(".git/worktrees/wt");
        std::fs::create_dir_all(&git_dir).unwrap();
        std::fs::write(git_dir.join("commondir"), "../..\n").unwrap();
        let worktree = dir.path().canonicalize().unwrap().join("wt");
        std::fs::create_dir_all(worktree.join("ops")).unwrap();
        std::fs::write(
            worktree.join(".git"),
            format!("gitdir: {}\n", git_dir.display()),
        )
        .unwrap();
        let identity = identify(&worktree.join("ops"), None).unwrap();
        assert_eq!(identity.name, "host.example/g/p//ops");
        // A submodule: a relative `gitdir`, no `commondir`.
        let sub = main.join("vendor/sub");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(".git"), "gitdir: ../../.git/modules/sub\n").unwrap();
        let modules = main.join(".git/modules/sub");
        std::fs::create_dir_all(&modules).unwrap();
        std::fs::write(
            modules.join("config"),
            "[remote \"origin\"]\n\turl = https://host.example/g/sub\n",
        )
        .unwrap();
        assert_eq!(identify(&sub, None).unwrap().name, "host.example/g/sub");
        // A `.git` file that says nothing of where: an error naming it.
        std::fs::write(sub.join(".git"), "nonsense\n").unwrap();
        let error = identify(&sub, None).unwrap_err();
        assert!(
            error.contains("sub/.git:1:") && error.contains("gitdir"),
            "{error}"
        );
    }
}
