//! The built-in providers, compiled in from the repository's top-level `providers/`.

use std::path::PathBuf;

use super::{Origin, ProviderSource};

/// Every file in `providers/`, by provider name (a test checks that none is missing).
pub const FILES: &[(&str, &str)] = &[
    ("aws", include_str!("../../providers/aws.toml")),
    ("do", include_str!("../../providers/do.toml")),
    ("k3d", include_str!("../../providers/k3d.toml")),
    (
        "kubeconfig",
        include_str!("../../providers/kubeconfig.toml"),
    ),
    ("linode", include_str!("../../providers/linode.toml")),
    (
        "mara-kubernetes",
        include_str!("../../providers/mara-kubernetes.toml"),
    ),
];

pub fn sources() -> impl Iterator<Item = ProviderSource> {
    FILES.iter().map(|(name, text)| ProviderSource {
        name: (*name).to_string(),
        origin: Origin::Builtin,
        display_path: PathBuf::from(format!("providers/{name}.toml (built in)")),
        text: (*text).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_in_providers_is_compiled_in() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("providers");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let compiled: Vec<String> = FILES.iter().map(|(name, _)| name.to_string()).collect();
        assert_eq!(on_disk, compiled);
    }
}
