//! `mara images import|update|list|forget` (docs/developer-loop.md): images from the local
//! Docker into the stack's running k3d cluster (`k3d image import`), each recorded in the ledger
//! with its local image id, so that `images update` imports again only what changed since.

use serde_json::json;

use super::{Local, capture, local, pass_through, tool_error};
use crate::cluster::{self, Cluster};
use crate::error::{Error, Problem, Result, plural};
use crate::ledger::{self, ImageRecord};
use crate::settings::{OutputFormat, Settings};
use crate::ui;

/// `mara images import IMAGE…`: the images go from the local Docker into the stack's running
/// cluster (`k3d image import`), and are recorded in the ledger with their local image id, for
/// `mara images update`.
pub fn import_images(settings: &Settings, images: Vec<String>) -> Result<()> {
    let local = local(settings, "images import")?;
    let cluster = local.running_cluster()?;
    let mut seen = std::collections::BTreeSet::new();
    let images: Vec<String> = images
        .iter()
        .map(|image| cluster::image_ref(image))
        .filter(|image| seen.insert(image.clone()))
        .collect();
    let ids = images
        .iter()
        .map(|image| local_image_id(&local, image)?.ok_or_else(|| not_local(image)))
        .collect::<Result<Vec<String>>>()?;
    let mut opener = local.ledger(settings)?;
    let ledger = opener.writable().map_err(|e| local.within(e))?;
    pass_through(
        "k3d",
        &cluster::import_args(&local.name, &images),
        &local.target.env,
    )?;
    let records = records(&local, &cluster, &images, &ids);
    ledger.record_images(&records)?;
    let lines: Vec<String> = records
        .iter()
        .map(|r| format!("Imported {} ({})", r.image, short_id(&r.image_id)))
        .collect();
    local.say(
        settings,
        format!(
            "{}\n`{}` imports {} again when {} local image changes.",
            lines.join("\n"),
            local.target.again("images update"),
            plural(records.len(), "it", "them"),
            plural(records.len(), "its", "their"),
        ),
        json!({"cluster": local.name, "imported": records}),
    )
}

/// `mara images update`: every image imported into the stack's cluster before is imported again
/// when its local image changed since (or the cluster was made again); the others are current.
pub fn update_images(settings: &Settings) -> Result<()> {
    let local = local(settings, "images update")?;
    let cluster = local.running_cluster()?;
    let mut opener = local.ledger(settings)?;
    let recorded = recorded_images(&mut opener, &local)?;
    if recorded.is_empty() {
        return local.say(
            settings,
            format!(
                "No image has been imported into cluster {} yet: `{}` imports one.",
                local.name,
                local.target.again("images import IMAGE…")
            ),
            json!({"cluster": local.name, "current": [], "imported": [], "missing": []}),
        );
    }
    let created = cluster.created.clone().unwrap_or_default();
    let (mut current, mut stale, mut missing) = (Vec::new(), Vec::new(), Vec::new());
    for record in recorded {
        match local_image_id(&local, &record.image)? {
            None => missing.push((record.image, record.cluster == created)),
            Some(id) if record.cluster != created => {
                stale.push((record.image, id, "the cluster was made again since"))
            }
            Some(id) if id != record.image_id => {
                stale.push((record.image, id, "its local image changed"))
            }
            Some(_) => current.push(record.image),
        }
    }
    let mut lines = Vec::new();
    let mut imported = Vec::new();
    if !stale.is_empty() {
        let images: Vec<String> = stale.iter().map(|(image, ..)| image.clone()).collect();
        let ids: Vec<String> = stale.iter().map(|(_, id, _)| id.clone()).collect();
        let ledger = opener.writable().map_err(|e| local.within(e))?;
        pass_through(
            "k3d",
            &cluster::import_args(&local.name, &images),
            &local.target.env,
        )?;
        imported = records(&local, &cluster, &images, &ids);
        ledger.record_images(&imported)?;
        for (image, id, why) in &stale {
            lines.push(format!("Imported {image} ({}): {why}", short_id(id)));
        }
    }
    for image in &current {
        lines.push(format!("Current: {image}"));
    }
    for (image, same_cluster) in &missing {
        lines.push(match same_cluster {
            true => format!(
                "Not in the local Docker any more: {image} (the cluster keeps the one it has)"
            ),
            false => format!(
                "Not in the local Docker any more: {image}, nor in the cluster, made again since (`{}` stops asking)",
                local.target.again(&format!("images forget {image}"))
            ),
        });
    }
    let missing: Vec<&String> = missing.iter().map(|(image, _)| image).collect();
    local.say(
        settings,
        lines.join("\n"),
        json!({"cluster": local.name, "current": current, "imported": imported, "missing": missing}),
    )
}

/// `mara images list`: the images recorded for the stack's cluster, with the id each had when
/// imported. Reads the ledger only.
pub fn list_images(settings: &Settings) -> Result<()> {
    let local = local(settings, "images list")?;
    let recorded = recorded_images(&mut local.ledger(settings)?, &local)?;
    if settings.output == OutputFormat::Json {
        return local.say(
            settings,
            String::new(),
            json!({"cluster": local.name, "images": recorded}),
        );
    }
    if recorded.is_empty() {
        return ui::note(
            settings,
            &format!(
                "No image has been imported into cluster {} yet.\n",
                local.name
            ),
        );
    }
    let rows: Vec<[String; 3]> = recorded
        .iter()
        .map(|r| {
            [
                r.image.clone(),
                short_id(&r.image_id).to_string(),
                r.imported.clone(),
            ]
        })
        .collect();
    ui::print(&ui::table("", ["IMAGE", "ID", "IMPORTED"], &rows))
}

/// `mara images forget IMAGE…`: `images update` no longer follows them; the cluster keeps what it
/// has. An image not recorded is an error (exit 3), and nothing is forgotten then.
pub fn forget_images(settings: &Settings, images: Vec<String>) -> Result<()> {
    let local = local(settings, "images forget")?;
    let images: Vec<String> = images.iter().map(|i| cluster::image_ref(i)).collect();
    let mut opener = local.ledger(settings)?;
    let recorded: Vec<String> = recorded_images(&mut opener, &local)?
        .into_iter()
        .map(|r| r.image)
        .collect();
    if let Some(unknown) = images.iter().find(|i| !recorded.contains(i)) {
        return Err(Error::config(
            Problem::new(format!(
                "image `{unknown}` is not recorded for cluster {}",
                local.name
            ))
            .maybe_hint(
                (!recorded.is_empty()).then(|| format!("recorded: {}", recorded.join(", "))),
            ),
        ));
    }
    let ledger = opener.writable().map_err(|e| local.within(e))?;
    let forgotten = ledger.forget_images(local.target.stack.name.as_str(), &images)?;
    local.say(
        settings,
        format!(
            "Forgot {forgotten} {}: `{}` no longer imports {}.",
            plural(forgotten, "image", "images"),
            local.target.again("images update"),
            plural(forgotten, "it", "them")
        ),
        json!({"cluster": local.name, "forgotten": images}),
    )
}

/// The images recorded for the stack (none without a ledger yet).
fn recorded_images(opener: &mut ledger::Opener, local: &Local) -> Result<Vec<ImageRecord>> {
    match opener.existing().map_err(|e| local.within(e))? {
        Some(ledger) => ledger.images(local.target.stack.name.as_str()),
        None => Ok(Vec::new()),
    }
}

fn records(
    local: &Local,
    cluster: &Cluster,
    images: &[String],
    ids: &[String],
) -> Vec<ImageRecord> {
    let now = crate::clock::rfc3339(std::time::SystemTime::now());
    images
        .iter()
        .zip(ids)
        .map(|(image, id)| ImageRecord {
            host: ledger::whoami().1,
            stack: local.target.stack.name.to_string(),
            image: image.clone(),
            image_id: id.clone(),
            cluster: cluster.created.clone().unwrap_or_default(),
            imported: now.clone(),
        })
        .collect()
}

/// `sha256:0123456789ab…` → `sha256:0123456789ab`, as Docker shows an id.
fn short_id(id: &str) -> &str {
    let end = id.find(':').map_or(0, |i| i + 1) + 12;
    id.get(..end).unwrap_or(id)
}

/// The local Docker's id of `image`; `None` when Docker does not have it.
fn local_image_id(local: &Local, image: &str) -> Result<Option<String>> {
    let args = cluster::image_id_args(image);
    let output = capture("docker", &args, &local.target.env)?;
    match output.code {
        Some(0) => Ok(output.stdout.lines().next().map(|l| l.trim().to_string())),
        _ if output.stderr.contains("No such image") => Ok(None),
        _ => Err(tool_error("docker", &args, &output)),
    }
}

fn not_local(image: &str) -> Error {
    Error::config(
        Problem::new(format!("image `{image}` is not in the local Docker")).hint(format!(
            "build it, or `docker pull {image}`, then import it"
        )),
    )
}
