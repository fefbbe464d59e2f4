//! Replacing every known secret value with `[secret]` in engine output, logs and reports.

/// The secret values of a run; longest first, so that a secret containing another is replaced whole.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

/// Values shorter than this are not searched for: replacing every `a` or `1` would mangle the
/// output without protecting anything.
const SHORTEST: usize = 3;

impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.chars().count() >= SHORTEST)
            .collect();
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        Redactor { secrets }
    }

    pub fn redact(&self, text: &str) -> String {
        let mut text = text.to_string();
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), "[secret]");
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_occurrence_longest_first() {
        let r = Redactor::new([
            "hunter2".to_string(),
            "hunter2-extra".to_string(),
            "x".to_string(),
        ]);
        assert_eq!(
            r.redact("a hunter2-extra b hunter2 x"),
            "a [secret] b [secret] x"
        );
    }
}
