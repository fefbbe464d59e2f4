//! `mara init` (docs/commands.md, "init"): makes the directory (`-C DIR`, else the current one)
//! a workspace. Without projects, a small runnable one (`starter`); in a repository of projects,
//! `mara.toml` for what it holds (`found`) — the built-in providers' projects under a directory
//! (the original MARA's `pulumi/python`), or a provider written to list its own. Every file is
//! decided before one is written, and none is overwritten: one already there is left, and said.

mod found;
mod starter;

use std::io::Write;
use std::path::Path;

use serde_json::json;

use crate::deployment;
use crate::error::{Error, Problem, Result};
use crate::settings::{OutputFormat, Settings};
use crate::ui;
use crate::workspace::MARA_TOML;
use crate::workspace::pulumi_project::PROJECT_FILES;
use found::{Found, Layout};

/// What `init` writes (relative paths and contents) and what to do next.
struct Made {
    layout: &'static str,
    files: Vec<(String, String)>,
    next: Vec<String>,
}

pub fn run(settings: &Settings) -> Result<()> {
    let root = std::path::absolute(&settings.start_dir)
        .map_err(|e| Error::read(&settings.start_dir, e))?;
    if !root.is_dir() {
        return Err(Error::usage(Problem::new(format!(
            "no directory {}",
            root.display()
        ))));
    }
    if std::fs::symlink_metadata(root.join(crate::workspace::MARA_TOML)).is_ok() {
        return Err(Error::usage(
            Problem::new(format!(
                "{} is a mara workspace already: its mara.toml is there",
                root.display()
            ))
            .hint("`mara validate` checks it; nothing was written"),
        ));
    }
    // A repository that is one project: mara runs projects in directories of their own.
    if PROJECT_FILES.iter().any(|f| root.join(f).is_file()) || found::has_tf(&root) {
        return Err(Error::usage(
            Problem::new(format!(
                "{} is a project itself (a Pulumi.yaml or .tf files at its top): nothing was written",
                root.display()
            ))
            .hint("run `mara init` in the directory above it, or move the project into a directory of its own"),
        ));
    }
    let made = decide(&root)?;
    let (written, kept) = write(&root, &made.files)?;
    ui::print(&said(settings, &made, &written, &kept))
}

/// What to write in `root`, from what it holds.
fn decide(root: &Path) -> Result<Made> {
    let workspace = crate::workspace::Workspace {
        root: root.to_path_buf(),
        settings_file: None,
        settings: Default::default(),
    };
    let registry = deployment::registry(&workspace)?;
    let builtin: Vec<_> = (registry.resolve_all()?.into_iter())
        .filter(|p| !p.is_abstract && p.origin == crate::provider::Origin::Builtin)
        .collect();
    Ok(match found::layout(root, found::projects(root), &builtin) {
        Layout::Empty => starter(),
        Layout::Builtin {
            projects_dir,
            matched,
            venvs,
        } => builtin_layout(&projects_dir, &matched, &venvs),
        Layout::Own(projects) => own(root, &projects),
    })
}

fn starter() -> Made {
    Made {
        layout: "starter",
        files: (starter::FILES.iter())
            .map(|(path, text)| (path.to_string(), text.to_string()))
            .collect(),
        next: vec![
            "mara validate".into(),
            "mara up --yes   # Terraform on PATH deploys the network, then the app".into(),
            "mara show-execution".into(),
        ],
    }
}

/// The original MARA's layout: `mara.toml` says where the projects are; the built-in providers
/// list them.
fn builtin_layout(projects_dir: &str, matched: &[found::Matched], venvs: &[String]) -> Made {
    let names: Vec<String> = (matched.iter())
        .map(|m| format!("{} ({} of {})", m.provider, m.found, m.of))
        .collect();
    let text = format!(
        "# mara's settings for this workspace (docs/formats.md, \"mara.toml\").\n\
         # The built-in providers' projects are there: {}.\n\
         projects_dir = {}\n",
        names.join(", "),
        toml_string(projects_dir)
    );
    let mut next: Vec<String> = (venvs.iter())
        .map(|venv| {
            format!("python3 -m venv {venv} && {venv}/bin/pip install -r <requirements>   # the virtualenv the projects' Pulumi.yaml names")
        })
        .collect();
    let provider = matched.first().map_or("aws", |m| m.provider.as_str());
    next.push(format!("mara validate -p {provider} -s dev"));
    next.push(format!("mara up -p {provider} -s dev"));
    Made {
        layout: "builtin",
        files: vec![("mara.toml".into(), text)],
        next,
    }
}

/// Projects of the repository's own: a provider that lists them (no order between them: that
/// is the user's to add), named after the directory.
fn own(root: &Path, projects: &[Found]) -> Made {
    let name = provider_name(root);
    let mut provider = format!(
        "# The projects mara init found; add the order between them with `after = [...]` or\n\
         # `[project.inputs]` (docs/formats.md, \"Providers\").\n\
         description = \"The projects of {name}\"\n\
         infra_type = \"{name}\"\n"
    );
    for project in projects {
        provider.push_str(&format!(
            "\n[[project]]\npath = {}\nengine = \"{}\"\n",
            toml_string(&project.path),
            project.engine.as_str()
        ));
        if let Some(pulumi) = &project.name {
            provider.push_str(&format!("description = {}\n", toml_string(pulumi)));
        }
    }
    let mara_toml = format!(
        "# mara's settings for this workspace (docs/formats.md, \"mara.toml\").\n\
         provider = \"{name}\"\n"
    );
    Made {
        layout: "projects",
        files: vec![
            ("mara.toml".into(), mara_toml),
            (format!("providers/{name}.toml"), provider),
            (
                "config/pulumi/environment".into(),
                "PULUMI_STACK=dev\n".into(),
            ),
        ],
        next: vec![
            format!("edit providers/{name}.toml: the order between the projects"),
            "mara validate".into(),
            "mara show-execution".into(),
        ],
    }
}

/// The directory's name as a provider's: lower case, letters, digits and dashes.
fn provider_name(root: &Path) -> String {
    let raw = root.file_name().map(|n| n.to_string_lossy().to_lowercase());
    let name: String = (raw.unwrap_or_default().chars())
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c,
            false => '-',
        })
        .collect();
    match name.trim_matches('-') {
        "" => "projects".into(),
        name => name.to_string(),
    }
}

fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

/// Each of `files` written under `root` when it is not there yet (never replaced): those
/// written, and those left as they were.
fn write(root: &Path, files: &[(String, String)]) -> Result<(Vec<String>, Vec<String>)> {
    let (mut written, mut kept) = (Vec::new(), Vec::new());
    // `mara.toml` last: a write that fails before it leaves no workspace for `init` to refuse.
    let (last, first): (Vec<_>, Vec<_>) = files.iter().partition(|(f, _)| f == MARA_TOML);
    for (relative, text) in first.into_iter().chain(last) {
        let path = root.join(relative);
        if std::fs::symlink_metadata(&path).is_ok() {
            kept.push(relative.clone());
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::write(parent, e))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::write(&path, e))?;
        file.write_all(text.as_bytes())
            .map_err(|e| Error::write(&path, e))?;
        written.push(relative.clone());
    }
    Ok((written, kept))
}

/// What was written, what was left, and what to do next.
fn said(settings: &Settings, made: &Made, written: &[String], kept: &[String]) -> String {
    if settings.output == OutputFormat::Json {
        let value =
            json!({"layout": made.layout, "written": written, "kept": kept, "next": made.next});
        return format!("{value}\n");
    }
    let mut out = String::new();
    for file in written {
        out.push_str(&format!("wrote {file}\n"));
    }
    for file in kept {
        out.push_str(&format!("kept  {file} (there already: not overwritten)\n"));
    }
    out.push_str("\nNext:\n");
    for step in &made.next {
        out.push_str(&format!("  {step}\n"));
    }
    out
}
