//! `mara config list`: every key of the shared configuration and the secrets project's, each
//! once (secrets as `[secret]`).

use std::path::PathBuf;

use serde_json::{Value, json};

use super::{both, merge, plain};
use crate::deployment::StackFiles;
use crate::error::Result;
use crate::settings::{OutputFormat, Settings};
use crate::workspace::config_path::redacted;

/// A key as the list shows it.
struct Entry {
    key: String,
    /// As shown: secrets as `[secret]`.
    value: Value,
    /// Whether it is, or holds, a secret.
    secret: bool,
    /// The files that set it (or part of it), the shared one first.
    files: Vec<PathBuf>,
}

pub(super) fn list(settings: &Settings, stack_files: &StackFiles) -> Result<()> {
    let workspace = &stack_files.workspace;
    // Each key once: a structured value split between the files (its secrets set with --path
    // --secret) is one entry, its secret parts as [secret], from the shared file first.
    let mut entries: Vec<Entry> = Vec::new();
    for file in both(stack_files)? {
        let Some(config) = file.config() else {
            continue;
        };
        let path = workspace.display(file.path()).into_owned();
        for (key, value) in &config.values {
            let shown = redacted(value);
            let secret = shown != *value;
            match entries.iter_mut().find(|e| e.key == *key) {
                Some(entry) => {
                    // A structured value's parts are merged; a scalar set in both shows the
                    // shared file's value, which every project but the secrets one reads.
                    if entry.value.is_object() && shown.is_object() {
                        merge(&mut entry.value, shown);
                        entry.secret |= secret;
                    }
                    entry.files.push(path.clone());
                }
                None => entries.push(Entry {
                    key: key.clone(),
                    value: shown,
                    secret,
                    files: vec![path.clone()],
                }),
            }
        }
    }
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    let text = match settings.output {
        OutputFormat::Json => json_list(entries),
        OutputFormat::Human => table(settings, &entries),
    };
    crate::ui::print(&text)
}

/// `--output json`: one object, by key.
fn json_list(entries: Vec<Entry>) -> String {
    let mut map = serde_json::Map::new();
    for Entry {
        key,
        value,
        secret,
        files,
    } in entries
    {
        let mut entry = json!({"value": value, "secret": secret, "file": files[0]});
        if let Some(secrets) = files.get(1) {
            entry["secrets_file"] = json!(secrets);
        }
        map.insert(key, entry);
    }
    format!(
        "{}\n",
        serde_json::to_string_pretty(&Value::Object(map)).expect("JSON")
    )
}

/// The table people read: key, value, the files that set it.
fn table(settings: &Settings, entries: &[Entry]) -> String {
    let table: Vec<[String; 3]> = (entries.iter())
        .map(|e| {
            let files: Vec<String> = e.files.iter().map(|f| f.display().to_string()).collect();
            [e.key.clone(), cell(&plain(&e.value)), files.join(", ")]
        })
        .collect();
    let headers = ["KEY", "VALUE", "FILE"];
    let widths = crate::ui::column_widths(headers, &table);
    let style = settings.stdout_style;
    let mut out = format!(
        "{}\n",
        style.bold(&format!(
            "{}  {}  {}",
            crate::ui::pad(headers[0], widths[0]),
            crate::ui::pad(headers[1], widths[1]),
            headers[2]
        ))
    );
    for [k, v, f] in &table {
        out.push_str(&format!(
            "{}  {}  {f}\n",
            crate::ui::pad(k, widths[0]),
            crate::ui::pad(v, widths[1])
        ));
    }
    out
}

/// A value in a table cell: on one line, and not wider than a screen.
fn cell(text: &str) -> String {
    const WIDTH: usize = 60;
    let line = text.replace('\r', "\\r").replace('\n', "\\n");
    match line.char_indices().nth(WIDTH) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}
