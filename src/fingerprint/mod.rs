//! Fingerprints of a project's inputs (docs/commands.md, "`--changed`"): its files (respecting `.gitignore`,
//! never mara's state directory), the shared stack configuration, the environment file, its entry
//! in the provider, and its dependencies' fingerprints.
//!
//! A fingerprint is `<full>:<own>`: `own` covers the project's own inputs, `full` adds its
//! dependencies', so a difference in `full` alone means "a dependency changed".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::engine::terraform::{InitStamp, STATE_FILE};
use crate::graph::Plan;
use crate::provider::Project;
use walk::Special;

mod cache;
mod walk;

/// Why a project runs, or is skipped, under `--changed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// It is not deployed: no successful `up` of it is recorded, or it was destroyed since.
    NeverDeployed,
    /// Its files, the configuration, the environment file or its provider entry changed.
    InputsChanged,
    /// Only something it depends on changed.
    DependencyChanged,
    /// Unchanged itself, but a project it depends on is deployed anew (it was destroyed alone,
    /// `--orphan-dependents`): what it made stands on what is gone.
    DependencyRedeployed,
    Unchanged,
}

impl Change {
    pub fn reason(&self) -> &'static str {
        match self {
            Change::NeverDeployed => "not deployed (never, or destroyed since)",
            Change::InputsChanged => "its inputs changed since its last successful up",
            Change::DependencyChanged => "a project it depends on changed",
            Change::DependencyRedeployed => "a project it depends on is deployed anew",
            Change::Unchanged => "unchanged since its last successful up",
        }
    }
}

/// Compares a fingerprint with the one of the last successful `up`.
pub fn compare(now: &str, before: Option<&str>) -> Change {
    let own = |fp: &str| {
        fp.split_once(':')
            .map(|(_, own)| own.to_string())
            .unwrap_or_default()
    };
    match before {
        None => Change::NeverDeployed,
        Some(before) if before == now => Change::Unchanged,
        Some(before) if own(before) == own(now) => Change::DependencyChanged,
        Some(_) => Change::InputsChanged,
    }
}

/// Keeps the hashes the last `fingerprints` made for the next command (`cache`): called by a
/// run once it runs — a command that only looks, or a run refused before it starts, writes
/// nothing.
pub fn keep_hashes() {
    cache::save_held();
}

/// Every project of the plan, by graph index, in execution order (dependencies first).
pub fn fingerprints(
    plan: &Plan<'_>,
    project_dir: impl Fn(&str) -> PathBuf,
    state_dir: &Path,
    stack: &str,
    shared: &[u8],
    env_file: &[u8],
) -> crate::error::Result<BTreeMap<usize, String>> {
    let mut common = Sha256::new();
    common.update(b"mara-fingerprint-1\0");
    common.update(shared);
    common.update(b"\0");
    common.update(env_file);
    let common = common.finalize();
    // The own inputs of the selected projects and of every project they come after (selected or
    // not: their inputs shape the selected ones'), found in one walk and hashed on every core
    // (the files' contents are most of the work).
    let Walked {
        counted,
        dirs,
        files,
    } = walked(plan, project_dir, state_dir)?;
    // A project whose files' times say they are as they were is not read again (`cache`).
    let cache = cache::Cache::open(state_dir);
    let own_hash = |k: usize| {
        let mut own = Sha256::new();
        own.update(common);
        let entry = entry(plan.graph.project(counted[k]));
        own.update(entry.as_bytes());
        let key = [common.as_slice(), entry.as_bytes(), stack.as_bytes()].join(&0u8);
        let signed =
            (files[k].as_deref()).and_then(|found| cache::signature(&key, &dirs[k], found));
        if let Some(hash) = signed.as_ref().and_then(|s| cache.get(&dirs[k], s)) {
            return hash;
        }
        hash_files(&mut own, &dirs[k], files[k].as_deref(), stack);
        let hash = hex(&own.finalize());
        if let Some(signature) = signed {
            cache.put(&dirs[k], signature, hash.clone());
        }
        hash
    };
    let owns: BTreeMap<usize, String> = (counted.iter().copied())
        .zip(crate::parallel::map(counted.len(), own_hash))
        .collect();
    cache::hold(cache);
    let mut done: BTreeMap<usize, String> = BTreeMap::new();
    for &i in plan.graph.order() {
        let Some(own) = owns.get(&i) else {
            continue;
        };
        let mut full = Sha256::new();
        full.update(own.as_bytes());
        for (j, _) in plan.graph.predecessors(i) {
            full.update(
                done.get(&j)
                    .map(String::as_str)
                    .unwrap_or_default()
                    .as_bytes(),
            );
        }
        done.insert(i, format!("{}:{own}", hex(&full.finalize())));
    }
    done.retain(|i, _| plan.contains(*i));
    Ok(done)
}

/// Each selected project's code, by graph index, as an approved plan keeps it (docs/commands.md,
/// "Saved plans"): its files and its entry in the provider — not the shared configuration nor
/// the environment file, whose parts that reach it are compared apart, nor what an engine
/// writes in its working directory (a module's `.terraform/` and local state: an apply made
/// elsewhere is the state's check to find).
pub fn code(
    plan: &Plan<'_>,
    project_dir: impl Fn(&str) -> PathBuf,
    state_dir: &Path,
    stack: &str,
) -> crate::error::Result<BTreeMap<usize, String>> {
    let Walked {
        counted,
        dirs,
        files,
    } = walked(plan, project_dir, state_dir)?;
    let code = |k: usize| {
        let i = counted[k];
        if !plan.contains(i) {
            return None;
        }
        let kept: Option<Vec<PathBuf>> = files[k].as_ref().map(|files| {
            let written = |path: &&PathBuf| {
                let relative = path.strip_prefix(&dirs[k]).unwrap_or(path);
                relative.components().any(|c| {
                    let name = c.as_os_str().to_string_lossy();
                    name == ".terraform"
                        || name.starts_with("terraform.tfstate")
                        || name.starts_with(".terraform.tfstate")
                })
            };
            files.iter().filter(|p| !written(p)).cloned().collect()
        });
        let mut hasher = Sha256::new();
        hasher.update(b"mara-code-1\0");
        hasher.update(entry(plan.graph.project(i)).as_bytes());
        hash_files(&mut hasher, &dirs[k], kept.as_deref(), stack);
        Some(format!("sha256:{}", hex(&hasher.finalize())))
    };
    let hashes = crate::parallel::map(counted.len(), code);
    Ok((counted.into_iter().zip(hashes))
        .filter_map(|(i, hash)| Some((i, hash?)))
        .collect())
}

/// The projects (graph indexes, sorted) whose files a fingerprint of `plan`'s counts: the
/// selected ones and every project they come after.
fn counted(plan: &Plan<'_>) -> Vec<usize> {
    let mut counted = vec![false; plan.graph.len()];
    let mut next: Vec<usize> = (0..plan.graph.len())
        .filter(|&i| plan.contains(i))
        .collect();
    while let Some(i) = next.pop() {
        if !std::mem::replace(&mut counted[i], true) {
            next.extend(plan.graph.predecessors(i).into_iter().map(|(j, _)| j));
        }
    }
    (0..counted.len()).filter(|&i| counted[i]).collect()
}

/// The ignore files the walk of `plan`'s projects would read that are not regular files, refused
/// as `fingerprints` refuses them (`validate` says so without hashing anything).
pub fn ignore_files_readable(
    plan: &Plan<'_>,
    project_dir: impl Fn(&str) -> PathBuf,
    state_dir: &Path,
) -> crate::error::Result<()> {
    walked(plan, project_dir, state_dir).map(|_| ())
}

/// What a fingerprint of `plan` counts: the projects (`counted`), their directories and their
/// files, found in one walk (the global gitignore read once for all of them); refused when the
/// walk meets an ignore file that is no regular file.
struct Walked {
    counted: Vec<usize>,
    dirs: Vec<PathBuf>,
    files: Vec<Option<Vec<PathBuf>>>,
}

fn walked(
    plan: &Plan<'_>,
    project_dir: impl Fn(&str) -> PathBuf,
    state_dir: &Path,
) -> crate::error::Result<Walked> {
    let global = global_gitignore()?;
    let counted = counted(plan);
    let dirs: Vec<PathBuf> = (counted.iter())
        .map(|&i| project_dir(&plan.graph.project(i).path))
        .collect();
    let special = Special::default();
    let mut files = project_files(&dirs, state_dir, &global, &special);
    special.refuse()?;
    // The backend mara writes for `state = "ledger"` is mara's, not the project's code: its
    // schema follows from the project's path.
    let mine = |p: &PathBuf| p.file_name().is_some_and(|n| n == STATE_FILE);
    for found in files.iter_mut().flatten() {
        found.retain(|p| !mine(p));
    }
    Ok(Walked {
        counted,
        dirs,
        files,
    })
}

/// The user's global gitignore (`core.excludesFile`, else `$XDG_CONFIG_HOME/git/ignore`), once
/// every file it is found through is known to be a regular file: the git configurations the
/// `ignore` crate reads (`GIT_CONFIG_GLOBAL`, `~/.gitconfig`, `$XDG_CONFIG_HOME/git/config`,
/// `GIT_CONFIG_SYSTEM` or `/etc/gitconfig`) and the excludes file they name.
fn global_gitignore() -> crate::error::Result<ignore::gitignore::Gitignore> {
    let env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home = env("HOME");
    let config = env("XDG_CONFIG_HOME").or_else(|| home.as_ref().map(|h| h.join(".config")));
    let configs: Vec<PathBuf> = [
        env("GIT_CONFIG_GLOBAL"),
        home.as_ref().map(|h| h.join(".gitconfig")),
        config.as_ref().map(|c| c.join("git/config")),
        Some(env("GIT_CONFIG_SYSTEM").unwrap_or_else(|| PathBuf::from("/etc/gitconfig"))),
    ]
    .into_iter()
    .flatten()
    .collect();
    let special = Special::default();
    let is_special = |path: &Path| std::fs::metadata(path).is_ok_and(|m| !m.is_file());
    let mut excludes: Vec<PathBuf> = config.iter().map(|c| c.join("git/ignore")).collect();
    for path in &configs {
        if is_special(path) {
            special.note(path.clone());
        } else if let Ok(text) = std::fs::read_to_string(path) {
            excludes.extend(excludes_files(&text, home.as_deref()));
        }
    }
    for path in excludes {
        if is_special(&path) {
            special.note(path);
        }
    }
    special.refuse()?;
    let (global, _) = ignore::gitignore::Gitignore::global();
    Ok(global)
}

/// The files a git configuration names as `core.excludesFile` (`~/` expanded).
fn excludes_files(text: &str, home: Option<&Path>) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('=')?;
            (key.trim().eq_ignore_ascii_case("excludesfile"))
                .then(|| value.trim().trim_matches('"'))
        })
        .map(|value| match (value.strip_prefix("~/"), home) {
            (Some(rest), Some(home)) => home.join(rest),
            _ => PathBuf::from(value),
        })
        .collect()
}

/// The project's provider entry, without where it was declared (moving lines is no change).
fn entry(project: &Project) -> String {
    let targets = |list: &[crate::provider::Reference]| {
        list.iter().map(|r| r.target.clone()).collect::<Vec<_>>()
    };
    let secrets: Vec<&str> = project.secrets.iter().map(|s| s.key.as_str()).collect();
    let commands = &project.commands;
    // Spelled as the fingerprints recorded before the type had its name.
    let commands = format!(
        "Steps {{ up: {:?}, preview: {:?}, refresh: {:?}, destroy: {:?} }}",
        commands.up, commands.preview, commands.refresh, commands.destroy
    );
    format!(
        "{}|{}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
        project.path,
        project.description,
        project.stage,
        targets(&project.after),
        targets(&project.before),
        project.engine,
        project.required_config,
        secrets,
        project.on_success,
        project.on_destroy,
        commands
    )
}

/// Each project's files (`dirs[i]`'s, in a walk as git sees it: `walk.rs`),
/// sorted; `None` for a project without a directory. Found in one walk from the projects' common
/// ancestor, so that each directory above them is looked at once rather than once per project
/// (its ignore files, its `.git`); a project the walk does not reach (behind a symlink, or in an
/// ignored directory) gets a walk of its own, as it always did.
fn project_files(
    dirs: &[PathBuf],
    state_dir: &Path,
    global: &ignore::gitignore::Gitignore,
    special: &Special,
) -> Vec<Option<Vec<PathBuf>>> {
    let mut files: Vec<Option<Vec<PathBuf>>> = vec![None; dirs.len()];
    // Only the projects that have a directory place the walk's root (the directories above one
    // that has none are no business of the walk's): a project is asked whether it has one only
    // when it would move the root found so far — most are inside it.
    let mut root: Option<PathBuf> = None;
    let mut placed = Vec::with_capacity(dirs.len());
    for (i, dir) in dirs.iter().enumerate() {
        match &root {
            Some(root) if dir.starts_with(root) => {}
            _ if !dir.is_dir() => continue,
            Some(above) => root = common_ancestor([above.as_path(), dir.as_path()].into_iter()),
            None => root = Some(dir.clone()),
        }
        placed.push(i);
    }
    let Some(root) = root else {
        return files;
    };
    let layout = Layout::new(dirs, &placed, &root);
    let keep = |path: &Path| layout.above.contains(path) || layout.owned(path);
    let filter = walk::Filter {
        state_dir,
        global,
        special,
        keep: &keep,
    };
    // A directory is found before what is in it: a project's list is there for its files.
    for (path, is_dir) in walk::walk(&root, &filter) {
        match is_dir {
            true => (layout.projects_at.get(&path).into_iter().flatten())
                .for_each(|&i| files[i] = Some(Vec::new())),
            false => {
                for i in layout.owners(&path) {
                    if let Some(list) = &mut files[i] {
                        list.push(path.clone());
                    }
                }
            }
        }
    }
    for &i in &placed {
        match &mut files[i] {
            // In the order a sorted walk gives (a directory's entries by name, depth first),
            // which is how paths compare: the fingerprints do not depend on which thread found
            // what.
            Some(list) => list.sort(),
            // A project the walk did not enter is walked on its own (when it has a directory).
            None if dirs[i].is_dir() => {
                files[i] = Some(walk_alone(&dirs[i], state_dir, global, special))
            }
            None => {}
        }
    }
    files
}

/// Where the projects are under the walk's root: each project's directory, and the directories
/// above them up to the root.
struct Layout {
    projects_at: std::collections::HashMap<PathBuf, Vec<usize>>,
    above: std::collections::HashSet<PathBuf>,
    /// Every path here is under the root: the directories holding one, up to the root, are its
    /// ancestors at least as long as the root (no comparison of components).
    root_len: usize,
}

impl Layout {
    fn new(dirs: &[PathBuf], placed: &[usize], root: &Path) -> Layout {
        let mut layout = Layout {
            projects_at: Default::default(),
            above: Default::default(),
            root_len: root.as_os_str().len(),
        };
        for &i in placed {
            let dir = &dirs[i];
            layout.projects_at.entry(dir.clone()).or_default().push(i);
            for ancestor in dir.ancestors().skip(1) {
                if !ancestor.starts_with(root) || !layout.above.insert(ancestor.to_path_buf()) {
                    break;
                }
            }
        }
        layout
    }

    /// The directories holding `path`, itself first, up to the root.
    fn holding<'p>(&self, path: &'p Path) -> impl Iterator<Item = &'p Path> {
        let root_len = self.root_len;
        path.ancestors()
            .take_while(move |a| a.as_os_str().len() >= root_len)
    }

    /// The projects whose directory holds `path` (nested projects: each of them).
    fn owners(&self, path: &Path) -> Vec<usize> {
        (self.holding(path))
            .filter_map(|a| self.projects_at.get(a))
            .flatten()
            .copied()
            .collect()
    }

    /// Whether a project's directory holds `path`.
    fn owned(&self, path: &Path) -> bool {
        self.holding(path).any(|a| self.projects_at.contains_key(a))
    }
}

/// The files of a project the walk from the root did not reach, by a walk of its own, sorted.
fn walk_alone(
    dir: &Path,
    state_dir: &Path,
    global: &ignore::gitignore::Gitignore,
    special: &Special,
) -> Vec<PathBuf> {
    let filter = walk::Filter {
        state_dir,
        global,
        special,
        keep: &|_| true,
    };
    let mut found: Vec<PathBuf> = (walk::walk(dir, &filter).into_iter())
        .filter(|(_, is_dir)| !is_dir)
        .map(|(path, _)| path)
        .collect();
    found.sort();
    found
}

/// The deepest directory that holds every one of `paths` (itself, for one).
fn common_ancestor<'a>(mut paths: impl Iterator<Item = &'a Path>) -> Option<PathBuf> {
    let mut common = paths.next()?.to_path_buf();
    for path in paths {
        while !path.starts_with(&common) {
            if !common.pop() {
                return None;
            }
        }
    }
    Some(common)
}

/// A project's files (`None`: it has no directory), their paths relative to `dir` and contents.
/// Its own stack file is Pulumi's: `stack select --create` writes its encryption salt there on
/// the first up. It counts without what Pulumi writes, so that the first up does not make every
/// project look changed to the next `up --changed`.
fn hash_files(hasher: &mut Sha256, dir: &Path, files: Option<&[PathBuf]>, stack: &str) {
    let Some(files) = files else {
        hasher.update(b"<no directory>");
        return;
    };
    let stack_files = [
        format!("Pulumi.{stack}.yaml"),
        format!("Pulumi.{stack}.yml"),
    ];
    let is_stack_file = |path: &Path| {
        path.parent() == Some(dir)
            && path
                .file_name()
                .is_some_and(|name| stack_files.iter().any(|f| name == f.as_str()))
    };
    for path in files {
        let content = crate::files::read(path).unwrap_or_default();
        if is_stack_file(path) {
            let kept = without_pulumi_keys(&String::from_utf8_lossy(&content));
            if !kept.is_empty() {
                hasher.update(b"stack file\0");
                hasher.update(kept.as_bytes());
                hasher.update(b"\0");
            }
            continue;
        }
        let relative = path.strip_prefix(dir).unwrap_or(path);
        hasher.update(relative.to_string_lossy().as_bytes());
        hasher.update(b"\0");
        hasher.update(&content);
        hasher.update(b"\0");
    }
}

/// A stack file without the keys Pulumi itself writes (`encryptionsalt`, `secretsprovider`,
/// `encryptedkey`); nothing at all when that leaves no configuration.
fn without_pulumi_keys(text: &str) -> String {
    let kept: Vec<&str> = text
        .lines()
        .filter(|line| {
            !["encryptionsalt:", "secretsprovider:", "encryptedkey:"]
                .iter()
                .any(|key| line.starts_with(key))
        })
        .filter(|line| !line.trim().is_empty())
        .collect();
    kept.join("\n")
}

/// The stamp a module's inputs make now: a hash, then whether `.terraform` exists.
fn init_stamp_now(stamp: &InitStamp) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"mara-init-1\0");
    hasher.update(stamp.binary.as_bytes());
    hasher.update(b"\0");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&stamp.dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                    name.ends_with(".tf")
                        || name.ends_with(".tf.json")
                        || name == ".terraform.lock.hcl"
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    for path in &names {
        hasher.update(path.file_name().unwrap_or_default().as_encoded_bytes());
        hasher.update(b"\0");
        hasher.update(crate::files::read(path).unwrap_or_default());
        hasher.update(b"\0");
    }
    let hash = hex(&hasher.finalize());
    let data = stamp.dir.join(".terraform").is_dir();
    format!("{hash} {}\n", if data { "data" } else { "no-data" })
}

/// What `terraform init` was last run on in a module, kept in mara's state directory: the binary,
/// the module's own `*.tf` and `*.tf.json` files and its `.terraform.lock.hcl` (where its backend,
/// providers and module calls are declared), and whether that left a `.terraform` directory. It
/// is current while those inputs are the same and that directory is still there
/// (docs/decisions.md, "Engine calls"). Whether `init` already ran on the module's current
/// inputs.
pub fn init_is_current(stamp: &InitStamp) -> bool {
    crate::files::read_to_string(&stamp.file).is_ok_and(|kept| kept == init_stamp_now(stamp))
}

/// Records that `init` just ran on the module's inputs (after it, as `init` writes the lock
/// file). A stamp that cannot be written only means `init` runs again next time.
pub fn record_init(stamp: &InitStamp) {
    let written = stamp
        .file
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| crate::files::write_atomic(&stamp.file, &init_stamp_now(stamp), 0o644));
    if let Err(error) = written {
        tracing::debug!(
            "the init stamp {} was not written: {error}",
            stamp.file.display()
        );
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{ExecutionGraph, Selection};
    use crate::provider::Registry;

    #[test]
    fn a_change_reaches_the_project_and_its_dependents_only() {
        let dir = tempfile::tempdir().unwrap();
        let graph = ExecutionGraph::build(&Registry::builtin().resolve("aws").unwrap()).unwrap();
        for i in graph.order() {
            let path = dir.path().join(&graph.project(*i).path);
            std::fs::create_dir_all(&path).unwrap();
            std::fs::write(path.join("Pulumi.yaml"), "name: x\n").unwrap();
        }
        std::fs::write(dir.path().join("kubernetes/logstore/.gitignore"), "*.tmp\n").unwrap();
        let plan = Plan::select(&graph, &Selection::default()).unwrap();
        let compute = || {
            fingerprints(
                &plan,
                |p| dir.path().join(p),
                &dir.path().join(".mara"),
                "dev",
                b"cfg",
                b"env",
            )
            .unwrap()
        };
        let before = compute();
        assert_eq!(before, compute(), "stable");
        // What `stack select --create` writes is Pulumi's, not an input; configuration is.
        let stack_file = dir.path().join("kubernetes/logstore/Pulumi.dev.yaml");
        std::fs::write(&stack_file, "encryptionsalt: v1:abc\n").unwrap();
        assert_eq!(before, compute(), "a stack file with only Pulumi's keys");
        std::fs::write(
            &stack_file,
            "encryptionsalt: v1:abc\nconfig:\n  logstore:x: 1\n",
        )
        .unwrap();
        assert_ne!(before, compute(), "a stack file with configuration");
        std::fs::remove_file(&stack_file).unwrap();
        // An ignored file changes nothing; a real one changes the project and its dependents.
        std::fs::write(dir.path().join("kubernetes/logstore/scratch.tmp"), "x").unwrap();
        assert_eq!(before, compute());
        std::fs::write(
            dir.path().join("kubernetes/logstore/values.yaml"),
            "replicas: 3\n",
        )
        .unwrap();
        let after = compute();
        let changed: Vec<(&str, Change)> = graph
            .order()
            .iter()
            .map(|&i| {
                (
                    graph.project(i).path.as_str(),
                    compare(&after[&i], Some(&before[&i])),
                )
            })
            .filter(|(_, c)| *c != Change::Unchanged)
            .collect();
        assert_eq!(
            changed,
            [
                ("kubernetes/logstore", Change::InputsChanged),
                ("kubernetes/logagent", Change::DependencyChanged)
            ]
        );
    }

    #[test]
    fn an_ignore_file_that_is_a_fifo_is_refused_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let graph =
            ExecutionGraph::build(&Registry::builtin().resolve("kubeconfig").unwrap()).unwrap();
        for i in graph.order() {
            std::fs::create_dir_all(dir.path().join(&graph.project(*i).path)).unwrap();
        }
        let first = dir.path().join(&graph.project(graph.order()[0]).path);
        let fifo = first.join(".gitignore");
        // Beside another: each is named.
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .arg(first.join(".ignore"))
            .status()
            .unwrap();
        assert!(made.success());
        let plan = Plan::select(&graph, &Selection::default()).unwrap();
        let refused =
            fingerprints(&plan, |p| dir.path().join(p), dir.path(), "dev", b"", b"").unwrap_err();
        assert_eq!(refused.exit_code(), crate::error::exit::CONFIG);
        assert!(
            (refused.problems().iter()).all(|p| p.message.contains("where an ignore file")),
            "{refused}"
        );
        let named: Vec<_> = (refused.problems().iter())
            .filter_map(|p| Some(p.location.as_ref()?.file.clone()))
            .collect();
        assert_eq!(named, [fifo.clone(), first.join(".ignore")]);
        // A selection that neither holds a project nor comes after it does not look there: the
        // last project's FIFO, and only the first project selected.
        std::fs::remove_file(&fifo).unwrap();
        std::fs::remove_file(first.join(".ignore")).unwrap();
        let last = graph.order()[graph.order().len() - 1];
        let fifo = dir
            .path()
            .join(&graph.project(last).path)
            .join(".gitignore");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        let only = Selection {
            only: vec![graph.project(graph.order()[0]).path.clone()],
            ..Selection::default()
        };
        let plan = Plan::select(&graph, &only).unwrap();
        let walked = fingerprints(&plan, |p| dir.path().join(p), dir.path(), "dev", b"", b"");
        assert!(walked.is_ok(), "{walked:?}");
        let all = Plan::select(&graph, &Selection::default()).unwrap();
        let refused = fingerprints(&all, |p| dir.path().join(p), dir.path(), "dev", b"", b"");
        assert!(refused.is_err(), "the whole plan walks the last project");
    }

    #[test]
    fn the_shared_configuration_changes_everything() {
        let dir = tempfile::tempdir().unwrap();
        let graph =
            ExecutionGraph::build(&Registry::builtin().resolve("kubeconfig").unwrap()).unwrap();
        let plan = Plan::select(&graph, &Selection::default()).unwrap();
        let a = fingerprints(
            &plan,
            |p| dir.path().join(p),
            dir.path(),
            "dev",
            b"cfg",
            b"env",
        )
        .unwrap();
        let b = fingerprints(
            &plan,
            |p| dir.path().join(p),
            dir.path(),
            "dev",
            b"cfg2",
            b"env",
        )
        .unwrap();
        assert!(
            a.iter()
                .all(|(i, fp)| compare(&b[i], Some(fp)) == Change::InputsChanged)
        );
        assert_eq!(compare(&a[&0], None), Change::NeverDeployed);
    }

    #[test]
    fn the_init_stamp_follows_the_module_files_the_lock_file_and_the_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        let module = dir.path().join("dns");
        std::fs::create_dir(&module).unwrap();
        std::fs::write(module.join("main.tf"), "terraform {}\n").unwrap();
        let stamp = InitStamp {
            file: dir.path().join("state/init/dns"),
            dir: module.clone(),
            binary: "terraform".into(),
        };
        assert!(!init_is_current(&stamp), "never initialized");
        std::fs::create_dir(module.join(".terraform")).unwrap();
        record_init(&stamp);
        assert!(init_is_current(&stamp));
        // A file that is not Terraform's does not count.
        std::fs::write(module.join("README.md"), "notes").unwrap();
        assert!(init_is_current(&stamp));
        std::fs::write(module.join(".terraform.lock.hcl"), "provider {}").unwrap();
        assert!(!init_is_current(&stamp), "the lock file changed");
        record_init(&stamp);
        std::fs::write(module.join("backend.tf"), "terraform { backend \"s3\" {} }").unwrap();
        assert!(!init_is_current(&stamp), "a module file was added");
        record_init(&stamp);
        std::fs::remove_dir(module.join(".terraform")).unwrap();
        assert!(!init_is_current(&stamp), "its data directory is gone");
        let tofu = InitStamp {
            binary: "tofu".into(),
            ..stamp.clone()
        };
        record_init(&stamp);
        assert!(!init_is_current(&tofu), "another binary");
    }

    /// The files of `dir` in the `ignore` crate's own walk, sorted, as mara's walk must find
    /// them (docs/decisions.md, issue 28: "The fingerprint walk is mara's own").
    fn crate_walk(
        dir: &Path,
        state_dir: &Path,
        global: &ignore::gitignore::Gitignore,
    ) -> Vec<PathBuf> {
        let (state_dir, global) = (state_dir.to_path_buf(), global.clone());
        // Within a repository (the tree below has one at its root) `require_git` decides only
        // where a repository's rules stop: at its root, as mara's do.
        ignore::WalkBuilder::new(dir)
            .hidden(false)
            .require_git(true)
            .git_global(false)
            .filter_entry(move |e| {
                let is_dir = e.file_type().is_some_and(|t| t.is_dir());
                e.file_name() != ".git"
                    && e.file_name() != ".mara"
                    && !e.path().starts_with(&state_dir)
                    && !global.matched(e.path(), is_dir).is_ignore()
            })
            .sort_by_file_path(|a, b| a.cmp(b))
            .build()
            .flatten()
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
            .map(|e| e.into_path())
            .collect()
    }

    #[test]
    fn one_walk_finds_what_a_walk_per_project_finds() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(".gitignore", "*.log\nhidden-dir/\n");
        write("infra/.gitignore", "build/\n!keep.log\n/anchored.txt\n");
        // Above the root, and through a symlink to it: the rules see the canonical path. A
        // .gitignore above the repository (the root has its .git) says nothing in it.
        std::fs::write(dir.path().join(".gitignore"), "*.py\n").unwrap();
        write(
            "apps/web/scratch.tmp",
            "ignored by the rules above the root",
        );
        write(
            "apps/web/dist/bundle.js",
            "ignored by the rules above the root",
        );
        // A .ignore over a .gitignore, a deeper file over one above, the exclude file.
        write(
            "apps/web/.gitignore",
            "secret.txt\nnotes/\n!keep.cache\n!kept.bak\n",
        );
        // Each kind decides on its own, deepest first: the root's .ignore over a deeper
        // .gitignore's exception, a deeper .gitignore's exception over the exclude file.
        write(".ignore", "*.cache\n");
        write("apps/web/keep.cache", "ignored by the root's .ignore");
        write("apps/web/kept.bak", "kept by the .gitignore's exception");
        std::fs::write(
            dir.path().join(".ignore"),
            "*.above\n*.tmp\nws/apps/web/dist/\n",
        )
        .unwrap();
        write("apps/web/x.above", "ignored by the .ignore above the root");
        // A byte-order mark and CRLF lines.
        write("apps/web/src/.gitignore", "\u{feff}*.o\r\nbuild-*\r\n");
        write("apps/web/src/a.o", "ignored");
        write("apps/web/src/build-1", "ignored");
        write("apps/web/src/main.c", "kept");
        write("apps/web/.ignore", "!secret.txt\n");
        write("apps/web/secret.txt", "kept by the .ignore");
        write("apps/web/notes/a.md", "ignored by the .gitignore");
        write("apps/web/src/anchored.txt", "not anchored here");
        write("infra/anchored.txt", "anchored: ignored");
        write(".git/info/exclude", "*.bak\n");
        write(".git/HEAD", "never walked");
        write("infra/vpc/old.bak", "ignored by the exclude file");
        write("infra/vpc/sub/.gitignore", "*\n!*.py\n");
        write(
            "infra/vpc/sub/x.py",
            "whitelisted under a rule that ignores all",
        );
        write("infra/vpc/sub/x.txt", "ignored");
        // A worktree's .git file: the exclude file of the common directory it names.
        write("repo2/.git/info/exclude", "*.wt\n");
        write("repo2/.git/worktrees/wt/commondir", "../..\n");
        let gitdir = root.join("repo2/.git/worktrees/wt");
        write("apps/wt/.git", &format!("gitdir: {}\n", gitdir.display()));
        write("apps/wt/main.py", "kept");
        write("apps/wt/a.wt", "ignored by the worktree's exclude file");
        write("infra/vpc/main.py", "vpc");
        write("infra/vpc/debug.log", "ignored by the root's rules");
        write("infra/vpc/keep.log", "kept by infra's");
        write("infra/vpc/build/out", "ignored by infra's rules");
        write("infra/vpc/.env", "hidden files count");
        write("infra/vpc/nested/Pulumi.yaml", "a project inside another");
        write("hidden-dir/app/main.py", "in an ignored directory");
        write("apps/web/index.js", "web");
        write("apps/web/.mara/x", "never");
        write(".mara/ledger.db", "never");
        write("elsewhere/linked/main.py", "behind a symlink");
        std::os::unix::fs::symlink(root.join("elsewhere/linked"), root.join("apps/linked"))
            .unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        let root = link;
        let dirs: Vec<PathBuf> = [
            "infra/vpc",
            "infra/vpc/nested",
            "hidden-dir/app",
            "apps/web",
            "apps/linked",
            "apps/missing",
            "apps/wt",
        ]
        .iter()
        .map(|p| root.join(p))
        .collect();
        // A project without a directory, outside the others: it does not move the walk's root
        // (the walk would meet the FIFO beside it).
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        let fifo = std::process::Command::new("mkfifo")
            .arg(dir.path().join("outside/.gitignore"))
            .status();
        assert!(fifo.unwrap().success());
        let dirs = [dirs, vec![dir.path().join("outside/missing")]].concat();
        let (global, _) = ignore::gitignore::Gitignore::global();
        let state_dir = root.join(".mara");
        let special = Special::default();
        let one_walk = project_files(&dirs, &state_dir, &global, &special);
        assert!(special.refuse().is_ok());
        let each: Vec<Option<Vec<PathBuf>>> = dirs
            .iter()
            .map(|dir| dir.is_dir().then(|| crate_walk(dir, &state_dir, &global)))
            .collect();
        assert_eq!(one_walk, each);
        let names = |i: usize| -> Vec<String> {
            one_walk[i]
                .iter()
                .flatten()
                .map(|p| p.strip_prefix(&dirs[i]).unwrap().display().to_string())
                .collect()
        };
        assert_eq!(
            names(0),
            [
                ".env",
                "keep.log",
                "main.py",
                "nested/Pulumi.yaml",
                "sub/x.py"
            ]
        );
        assert_eq!(
            names(3),
            [
                ".gitignore",
                ".ignore",
                "index.js",
                "kept.bak",
                "secret.txt",
                "src/.gitignore",
                "src/anchored.txt",
                "src/main.c"
            ]
        );
        assert_eq!(names(2), ["main.py"], "its own walk, as before");
        assert_eq!(names(4), ["main.py"], "behind a symlink: its own walk");
        assert_eq!(one_walk[5], None);
        assert_eq!(names(6), ["main.py"]);
        assert_eq!(one_walk[7], None);
    }
}
